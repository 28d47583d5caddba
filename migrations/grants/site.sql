-- site: the site's health and buffer state, and its weather series (site_weather, 00026); it reads the replication state
-- through PostgreSQL's functions (pg_last_wal_replay_lsn, ...), which every role may call.
-- One line per table: a table the service needs gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_site; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON site_weather TO obsops_site; -- 00026: the site's PWV series (writes, reads, pruning)
GRANT USAGE, SELECT ON SEQUENCE site_weather_id_seq TO obsops_site;
