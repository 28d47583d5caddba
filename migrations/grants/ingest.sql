-- ingest: executions, raw data packages and files, claims' collisions (migrations 00007, 00018).
-- One line per table: a new table of the service gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_ingest; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON executed_obs_units TO obsops_ingest;
GRANT SELECT, INSERT, UPDATE, DELETE ON raw_data_packages TO obsops_ingest;
GRANT SELECT, INSERT, UPDATE, DELETE ON raw_data_files TO obsops_ingest;
GRANT SELECT, INSERT, UPDATE, DELETE ON raw_data_package_files TO obsops_ingest;
GRANT SELECT, INSERT, UPDATE, DELETE ON ingest_collisions TO obsops_ingest;
GRANT USAGE, SELECT ON SEQUENCE ingest_collisions_id_seq TO obsops_ingest;
GRANT SELECT, INSERT, UPDATE, DELETE ON ingest_replayed_files TO obsops_ingest; -- the committed filter's replayed files (00031; UPDATE: taken FOR UPDATE SKIP LOCKED)
-- Reads of other services' tables:
GRANT SELECT ON obs_units TO obsops_ingest; -- catalog's: an execution must name a planned obs unit
GRANT SELECT ON instrument_modules TO obsops_ingest; -- catalog's: and a module of its instrument
-- Writes into other services' tables, by triggers that run as the writer:
GRANT INSERT ON transfer_counter_deltas TO obsops_ingest; -- transfer_count_files, on raw_data_files
