-- ingest_note_replayed_files lists the files a secondary site's replay inserts into
-- raw_data_files (trigger raw_data_files_replayed, which fires only on connections that set
-- obsops.origin_site) in ingest_replayed_files, for the main site's API to learn into its
-- committed filter (services/ingest/buffer/committed.go) and remove.
--
-- History: 00031.

CREATE OR REPLACE FUNCTION ingest_note_replayed_files() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ingest_replayed_files (file_id, instrument_module_id, path)
    SELECT id, instrument_module_id, path FROM new_rows;
    RETURN NULL;
END $$;
