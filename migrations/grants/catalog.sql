-- catalog: instruments, sources, observing programs, obs units, visibility (migrations 00006, 00009).
-- One line per table: a new table of the service gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_catalog; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON instruments TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON instrument_modules TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON sources TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON source_aliases TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON observing_programs TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON obs_units TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON observing_program_members TO obsops_catalog; -- 00022: program owners
GRANT SELECT, INSERT, UPDATE, DELETE ON visibility_heatmaps TO obsops_catalog;
GRANT SELECT, INSERT, UPDATE, DELETE ON visibility_jobs TO obsops_catalog;
GRANT USAGE, SELECT ON SEQUENCE sources_id_seq, source_aliases_id_seq, observing_programs_id_seq, obs_units_id_seq, visibility_jobs_id_seq TO obsops_catalog;
-- Reads of other services' tables:
GRANT SELECT ON executed_obs_units TO obsops_catalog; -- ingest's: an obs unit's executions (progress, deletes)
GRANT SELECT ON site_weather TO obsops_catalog; -- the site's: obs units' PWV limits (visibility, pkg/weather Store.Load)
