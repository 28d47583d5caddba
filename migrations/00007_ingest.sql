-- Ingest: executed obs units, raw data files and raw data packages. Written only by the ingest
-- service (its worker applies buffered writes; finalize and file updates are direct).
--
-- Primary keys are UUIDs, created offline by instruments or by the ingest API (UUIDv7). Links
-- between these buffered records (file → executed obs unit, file → package, package → executed
-- obs unit) are deliberately NOT foreign keys: buffered writes arrive in any order (a file before
-- its package, a finish before its start), and every arrival order must give the same rows.
-- Orphans are reported by `ingest admin orphans`. Links to the catalog's reference rows are
-- foreign keys: executed_obs_units.obs_unit_id → obs_units(id) without an ON DELETE action, so
-- deleting a program or obs unit with executed observations fails (SQLSTATE 23503 → 409).

-- +goose Up
CREATE TABLE executed_obs_units (
    id                   UUID        PRIMARY KEY,
    -- NULL only while a finish has been applied before its start.
    obs_unit_id          BIGINT      REFERENCES obs_units (id),
    instrument_module_id INTEGER     REFERENCES instrument_modules (id),
    site                 TEXT        CHECK (length(site) BETWEEN 1 AND 64),
    status               TEXT        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed', 'aborted')),
    start_time           TIMESTAMPTZ,
    end_time             TIMESTAMPTZ,
    start_meta           JSONB       NOT NULL DEFAULT '{}',
    finish_meta          JSONB       NOT NULL DEFAULT '{}',
    start_tx             UUID,
    finish_tx            UUID,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TRIGGER executed_obs_units_updated_at BEFORE UPDATE ON executed_obs_units FOR EACH ROW EXECUTE FUNCTION set_updated_at();
CREATE INDEX executed_obs_units_obs_unit ON executed_obs_units (obs_unit_id, start_time DESC);

CREATE TABLE raw_data_packages (
    id                   UUID        PRIMARY KEY,
    executed_obs_unit_id UUID        NOT NULL,
    instrument_module_id INTEGER     NOT NULL REFERENCES instrument_modules (id),
    name                 TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
    status               TEXT        NOT NULL DEFAULT 'building' CHECK (status IN ('building', 'complete')),
    -- Files named at creation (they may be applied later than the package).
    file_ids             UUID[]      NOT NULL DEFAULT '{}',
    size_bytes           BIGINT      CHECK (size_bytes >= 0),
    checksum             TEXT,
    finalized_at         TIMESTAMPTZ,
    -- The finalize request as given (sorted file ids), so a repeated finalize is recognised.
    finalize_hash        TEXT,
    tx                   UUID,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (status = 'building' OR (size_bytes IS NOT NULL AND checksum IS NOT NULL AND finalized_at IS NOT NULL))
);
CREATE TRIGGER raw_data_packages_updated_at BEFORE UPDATE ON raw_data_packages FOR EACH ROW EXECUTE FUNCTION set_updated_at();
CREATE INDEX raw_data_packages_executed_obs_unit ON raw_data_packages (executed_obs_unit_id);
CREATE INDEX raw_data_packages_file_ids ON raw_data_packages USING gin (file_ids);
CREATE INDEX raw_data_packages_status ON raw_data_packages (status, finalized_at);

CREATE TABLE raw_data_files (
    id                   UUID        PRIMARY KEY,
    executed_obs_unit_id UUID        NOT NULL,
    instrument_module_id INTEGER     NOT NULL REFERENCES instrument_modules (id),
    path                 TEXT        NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
    size_bytes           BIGINT      NOT NULL CHECK (size_bytes >= 0),
    checksum             TEXT        NOT NULL CHECK (checksum ~ '^(sha256:[0-9a-f]{64}|xxh64:[0-9a-f]{16})$'),
    raw_data_package_id  UUID,
    meta                 JSONB       NOT NULL DEFAULT '{}',
    tx                   UUID,
    -- When the file was written (the client's created_at), else when it was accepted.
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    committed_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TRIGGER raw_data_files_updated_at BEFORE UPDATE ON raw_data_files FOR EACH ROW EXECUTE FUNCTION set_updated_at();
CREATE INDEX raw_data_files_package ON raw_data_files (raw_data_package_id) WHERE raw_data_package_id IS NOT NULL;
CREATE INDEX raw_data_files_executed_obs_unit ON raw_data_files (executed_obs_unit_id);

-- +goose Down
DROP TABLE raw_data_files;
DROP TABLE raw_data_packages;
DROP TABLE executed_obs_units;
