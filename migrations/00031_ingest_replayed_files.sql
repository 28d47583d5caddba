-- Issue 23, the cost of rule 2 at acknowledgement: the main site's API keeps a Bloom filter of
-- every committed file's path and id in Redis (services/ingest/buffer/committed.go), learnt as
-- its own buffer holds them. A secondary site's replay commits files that never pass the main's
-- Redis: this lists them for the main's API to learn (and remove) within a second.
--
-- The secondary's worker says who it is with the connection setting obsops.origin_site (its
-- OPS_SITE_NAME, services/ingest/postgres/conn.go); the main's own writers leave it unset, so
-- the trigger's WHEN is false for them and its function is never called (the transition table
-- is captured for raw_data_files_count_insert anyway).

-- +goose Up
CREATE TABLE ingest_replayed_files (
    file_id              UUID    NOT NULL,
    instrument_module_id INTEGER NOT NULL,
    path                 TEXT    NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION ingest_note_replayed_files() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ingest_replayed_files (file_id, instrument_module_id, path)
    SELECT id, instrument_module_id, path FROM new_rows;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER raw_data_files_replayed AFTER INSERT ON raw_data_files
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (coalesce(current_setting('obsops.origin_site', true), '') <> '')
    EXECUTE FUNCTION ingest_note_replayed_files();

-- +goose Down
DROP TRIGGER raw_data_files_replayed ON raw_data_files;
DROP FUNCTION ingest_note_replayed_files();
DROP TABLE ingest_replayed_files;
