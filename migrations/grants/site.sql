-- site: the site's health and buffer state. It owns no table; it reads the replication state
-- through PostgreSQL's functions (pg_last_wal_replay_lsn, ...), which every role may call.
-- One line per table: a table the service needs gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_site; -- readiness: the schema's version
