-- transfer: sites, locations, operations, packages' states and copies, counters (migrations 00008,
-- 00010-00014, 00020, 00021).
-- One line per table: a new table of the service gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_transfer; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON sites TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON data_locations TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON package_states TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON data_transfer_packages TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON data_transfer_package_members TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON staging_jobs TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON operations TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON operation_history TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON operation_failures TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON data_transfers TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON long_term_archive_transfers TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON physical_copies TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON transfer_counters TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON transfer_counter_deltas TO obsops_transfer;
GRANT SELECT, INSERT, UPDATE, DELETE ON transfer_replication_rule TO obsops_transfer;
GRANT USAGE, SELECT ON SEQUENCE data_transfer_packages_id_seq, staging_jobs_id_seq, operations_id_seq, operation_history_id_seq,
    operation_failures_id_seq, data_transfers_id_seq, long_term_archive_transfers_id_seq, physical_copies_id_seq,
    transfer_overview_seq TO obsops_transfer;
-- Reads of other services' tables:
GRANT SELECT ON raw_data_packages TO obsops_transfer; -- ingest's: the packages to move, their size and checksum
