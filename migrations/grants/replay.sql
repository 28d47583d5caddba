-- replay: the role a SECONDARY site (the observatory) holds at the main site's database, used by its
-- ingest (the worker's replay of buffered writes, and ingest's two direct writes there: a package's
-- finalize, a file's update) and by nothing else at that site (decisions §45). Exactly the rows the
-- replay writes (services/ingest/postgres apply.go, batch.go, direct.go): no DELETE, no read or write of
-- catalog, authtoken, site or transfer tables. TestReplayRoleGrantsAreExactly holds this file to that list.
GRANT SELECT, INSERT, UPDATE ON executed_obs_units TO obsops_replay;
GRANT SELECT, INSERT, UPDATE ON raw_data_packages TO obsops_replay;
GRANT SELECT, INSERT, UPDATE ON raw_data_files TO obsops_replay;
GRANT SELECT, INSERT, UPDATE ON raw_data_package_files TO obsops_replay;
GRANT SELECT, INSERT, UPDATE ON ingest_collisions TO obsops_replay;
GRANT USAGE, SELECT ON SEQUENCE ingest_collisions_id_seq TO obsops_replay;
-- Writes into other services' tables, by triggers that run as the writer (§35):
GRANT INSERT ON transfer_counter_deltas TO obsops_replay; -- transfer_count_files, on raw_data_files
GRANT INSERT ON ingest_replayed_files TO obsops_replay; -- ingest_note_replayed_files, on raw_data_files: its files for the main's committed filter (§48)
