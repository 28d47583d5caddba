-- set_updated_at keeps a table's updated_at column current on every UPDATE. Tables opt in with a
-- BEFORE UPDATE ... FOR EACH ROW trigger, created by the migration that creates the table:
-- users (00002), sources, observing_programs, obs_units (00006), executed_obs_units,
-- raw_data_packages, raw_data_files (00007). No Go code calls it; every UPDATE of those tables by
-- authtoken, catalog and ingest runs it.
--
-- History: 00001.

CREATE OR REPLACE FUNCTION set_updated_at() RETURNS trigger AS $$
BEGIN
    NEW.updated_at = now();
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
