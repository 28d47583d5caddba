-- The transfer service's tables: where data lives (sites, data locations), the
-- operations that move it (six kinds, one id space), their append-only history and failure trail,
-- data transfer packages, the legacy data_transfer / long_term_archive_transfer rows (pointing to
-- their operation rows by foreign key), staging jobs, physical copies, and each raw data package's
-- lifecycle state. Written only by the transfer service. Raw data packages themselves are ingest's
-- (raw_data_packages); transfer refers to them by their UUID and never writes them.

-- +goose Up
-- Sites and the storage locations at them. Seeded below; operators add or deactivate rows with SQL
-- (see README, "Transfer"). role: source (where packages are built), buffer (where they wait for
-- transfer and are grouped into DTPs), long_term_archive (a transfer + unpack + archive target),
-- processing (where staging copies archived packages on request).
CREATE TABLE sites (
    id         INTEGER     PRIMARY KEY,
    name       TEXT        NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    site_type  TEXT        NOT NULL CHECK (site_type IN ('observatory', 'data_centre', 'archive')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE data_locations (
    id         INTEGER     PRIMARY KEY,
    site_id    INTEGER     NOT NULL REFERENCES sites (id),
    name       TEXT        NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    role       TEXT        NOT NULL CHECK (role IN ('source', 'buffer', 'long_term_archive', 'processing')),
    base_path  TEXT        NOT NULL,
    active     BOOLEAN     NOT NULL DEFAULT true,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX data_locations_role ON data_locations (role) WHERE active;

INSERT INTO sites (id, name, site_type) VALUES
    (1, 'fyst', 'observatory'),
    (2, 'cologne', 'data_centre'),
    (3, 'cornell', 'archive');
INSERT INTO data_locations (id, site_id, name, role, base_path) VALUES
    (1, 1, 'fyst-source', 'source', '/data/fyst/raw'),
    (2, 2, 'cologne-buffer', 'buffer', '/data/cologne/buffer'),
    (3, 2, 'cologne-archive', 'long_term_archive', '/archive/cologne'),
    (4, 3, 'cornell-archive', 'long_term_archive', '/archive/cornell'),
    (5, 2, 'cologne-processing', 'processing', '/scratch/cologne/staging');

-- Lifecycle state of each raw data package that entered the pipeline (finalized by ingest): a
-- cache of the derivation from its operation chain (the rules: transfer_derived_state, from 00010;
-- its current body is functions/transfer_derived_state.sql), kept in step in the same
-- transaction as every operation change, checked by a periodic sweep.
CREATE TABLE package_states (
    raw_data_package_id      UUID        PRIMARY KEY,
    state                    TEXT        NOT NULL CHECK (state IN ('WAITING', 'TRANSFERRING', 'ARCHIVED', 'FAILED')),
    name                     TEXT        NOT NULL DEFAULT '',
    size_bytes               BIGINT      NOT NULL DEFAULT 0 CHECK (size_bytes >= 0),
    instrument_module_id     INTEGER,
    data_transfer_package_id BIGINT,
    finalized_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    state_changed_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX package_states_list ON package_states (created_at DESC, raw_data_package_id DESC);
CREATE INDEX package_states_state_list ON package_states (state, created_at DESC, raw_data_package_id DESC);
CREATE INDEX package_states_undistributed ON package_states (finalized_at) WHERE data_transfer_package_id IS NULL;
CREATE INDEX package_states_finalized ON package_states (finalized_at);
CREATE INDEX package_states_dtp ON package_states (data_transfer_package_id) WHERE data_transfer_package_id IS NOT NULL;

-- Data transfer packages: completed raw data packages grouped (size/age thresholds) for transfer.
-- state: BUILDING (its data_transfer_package operation is not done), BUILT, TRANSFERRED (every
-- transfer done), UNPACKED (every unpack done).
CREATE TABLE data_transfer_packages (
    id            BIGSERIAL   PRIMARY KEY,
    name          TEXT        NOT NULL UNIQUE,
    location_id   INTEGER     NOT NULL REFERENCES data_locations (id),
    state         TEXT        NOT NULL DEFAULT 'BUILDING' CHECK (state IN ('BUILDING', 'BUILT', 'TRANSFERRED', 'UNPACKED')),
    package_count INTEGER     NOT NULL CHECK (package_count > 0),
    size_bytes    BIGINT      NOT NULL CHECK (size_bytes >= 0),
    checksum      TEXT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX data_transfer_packages_list ON data_transfer_packages (created_at DESC, id DESC);
CREATE INDEX data_transfer_packages_state_list ON data_transfer_packages (state, created_at DESC, id DESC);
ALTER TABLE package_states ADD CONSTRAINT package_states_dtp_fk
    FOREIGN KEY (data_transfer_package_id) REFERENCES data_transfer_packages (id);

CREATE TABLE data_transfer_package_members (
    data_transfer_package_id BIGINT      NOT NULL REFERENCES data_transfer_packages (id),
    raw_data_package_id      UUID        NOT NULL UNIQUE REFERENCES package_states (raw_data_package_id),
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (data_transfer_package_id, raw_data_package_id)
);

-- Staging requests: copy archived packages to a processing location.
CREATE TABLE staging_jobs (
    id                      BIGSERIAL   PRIMARY KEY,
    requested_by            TEXT        NOT NULL,
    destination_location_id INTEGER     NOT NULL REFERENCES data_locations (id),
    reason                  TEXT        NOT NULL DEFAULT '',
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at              TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Operations of all six kinds in one table, so ids are unique across kinds and (kind, id) names
-- one. The subject columns used depend on the kind:
--   raw_data_package      raw_data_package_id              (build the tar at the source, move to the buffer)
--   data_transfer_package data_transfer_package_id         (build the DTP at the buffer)
--   transfer              data_transfer_package_id + destination (one per archive location)
--   unpack                data_transfer_package_id + destination (after its transfer)
--   long_term_archive     raw_data_package_id + destination (one per archive location)
--   staging               raw_data_package_id + staging_job_id (to the job's processing location)
CREATE TABLE operations (
    id                       BIGSERIAL   PRIMARY KEY,
    kind                     TEXT        NOT NULL CHECK (kind IN ('transfer', 'unpack', 'long_term_archive', 'staging', 'raw_data_package', 'data_transfer_package')),
    status                   TEXT        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'SCHEDULED', 'IN_PROGRESS', 'COMPLETED', 'FAILED')),
    raw_data_package_id      UUID        REFERENCES package_states (raw_data_package_id),
    data_transfer_package_id BIGINT      REFERENCES data_transfer_packages (id),
    staging_job_id           BIGINT      REFERENCES staging_jobs (id),
    site_id                  INTEGER     NOT NULL REFERENCES sites (id),
    source_location_id       INTEGER     REFERENCES data_locations (id),
    destination_location_id  INTEGER     REFERENCES data_locations (id),
    retry_count              INTEGER     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retries              INTEGER     NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    attempt                  INTEGER     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_holder             TEXT,
    lease_expires_at         TIMESTAMPTZ,
    next_attempt_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error_type          TEXT,
    last_error               TEXT,
    bytes                    BIGINT      CHECK (bytes >= 0),
    checksum                 TEXT,
    started_at               TIMESTAMPTZ,
    completed_at             TIMESTAMPTZ,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((status = 'IN_PROGRESS') = (lease_holder IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK (CASE kind
        WHEN 'raw_data_package' THEN raw_data_package_id IS NOT NULL
        WHEN 'data_transfer_package' THEN data_transfer_package_id IS NOT NULL
        WHEN 'transfer' THEN data_transfer_package_id IS NOT NULL AND destination_location_id IS NOT NULL
        WHEN 'unpack' THEN data_transfer_package_id IS NOT NULL AND destination_location_id IS NOT NULL
        WHEN 'long_term_archive' THEN raw_data_package_id IS NOT NULL AND destination_location_id IS NOT NULL
        WHEN 'staging' THEN raw_data_package_id IS NOT NULL AND staging_job_id IS NOT NULL
    END)
);
-- One operation per step: the planner inserts with ON CONFLICT DO NOTHING, so running it twice
-- creates nothing twice.
CREATE UNIQUE INDEX operations_one_rdp ON operations (raw_data_package_id) WHERE kind = 'raw_data_package';
CREATE UNIQUE INDEX operations_one_dtp ON operations (data_transfer_package_id) WHERE kind = 'data_transfer_package';
CREATE UNIQUE INDEX operations_one_transfer ON operations (data_transfer_package_id, destination_location_id) WHERE kind = 'transfer';
CREATE UNIQUE INDEX operations_one_unpack ON operations (data_transfer_package_id, destination_location_id) WHERE kind = 'unpack';
CREATE UNIQUE INDEX operations_one_archive ON operations (raw_data_package_id, destination_location_id) WHERE kind = 'long_term_archive';
CREATE UNIQUE INDEX operations_one_staging ON operations (staging_job_id, raw_data_package_id) WHERE kind = 'staging';
-- Claiming (per kind, due first), lease expiry, resets of every FAILED operation of a kind, chains.
CREATE INDEX operations_claim ON operations (kind, next_attempt_at, id) WHERE status = 'PENDING';
CREATE INDEX operations_leases ON operations (lease_expires_at) WHERE status = 'IN_PROGRESS';
CREATE INDEX operations_failed ON operations (kind, id) WHERE status = 'FAILED';
CREATE INDEX operations_rdp ON operations (raw_data_package_id) WHERE raw_data_package_id IS NOT NULL;
CREATE INDEX operations_dtp ON operations (data_transfer_package_id) WHERE data_transfer_package_id IS NOT NULL;
-- Successors the planner has still to create: completed operations it has not yet advanced.
ALTER TABLE operations ADD COLUMN advanced BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX operations_to_advance ON operations (id) WHERE status = 'COMPLETED' AND NOT advanced;

-- Every status change of every operation, in order; never updated or deleted (trigger below).
-- event: created, claimed, completed, failed (-> FAILED), retry (-> PENDING after a retryable
-- failure), stalled (lease expired), reset.
CREATE TABLE operation_history (
    id           BIGSERIAL   PRIMARY KEY,
    operation_id BIGINT      NOT NULL REFERENCES operations (id),
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    event        TEXT        NOT NULL CHECK (event IN ('created', 'claimed', 'completed', 'failed', 'retry', 'stalled', 'reset')),
    from_status  TEXT,
    to_status    TEXT        NOT NULL,
    actor        TEXT        NOT NULL,
    reason       TEXT,
    error        TEXT,
    attempt      INTEGER     NOT NULL DEFAULT 0,
    retry_count  INTEGER     NOT NULL DEFAULT 0
);
CREATE INDEX operation_history_operation ON operation_history (operation_id, id);

-- The durable failure trail: one row per failed attempt (a mover's report or a stall).
CREATE TABLE operation_failures (
    id           BIGSERIAL   PRIMARY KEY,
    operation_id BIGINT      NOT NULL REFERENCES operations (id),
    history_id   BIGINT      NOT NULL UNIQUE REFERENCES operation_history (id),
    attempt      INTEGER     NOT NULL,
    error_type   TEXT        NOT NULL,
    message      TEXT        NOT NULL,
    retryable    BOOLEAN     NOT NULL,
    log_path     TEXT,
    reported_by  TEXT        NOT NULL,
    occurred_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX operation_failures_operation ON operation_failures (operation_id, id);

-- +goose StatementBegin
CREATE FUNCTION transfer_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END $$;
-- +goose StatementEnd
CREATE TRIGGER operation_history_append_only BEFORE UPDATE OR DELETE ON operation_history
    FOR EACH ROW EXECUTE FUNCTION transfer_append_only();
CREATE TRIGGER operation_failures_append_only BEFORE UPDATE OR DELETE ON operation_failures
    FOR EACH ROW EXECUTE FUNCTION transfer_append_only();

-- Legacy rows of the original data-transfer system, kept for its clients and reset shims. Each
-- points to its operation rows by foreign key; status/retry columns are the legacy mirror,
-- written when a mover reports an outcome and never by resets (legacy readers see the last outcome
-- a mover reported; a reset is recorded in operations and operation_history only).
CREATE TABLE data_transfers (
    id                       BIGSERIAL   PRIMARY KEY,
    data_transfer_package_id BIGINT      NOT NULL REFERENCES data_transfer_packages (id),
    origin_location_id       INTEGER     NOT NULL REFERENCES data_locations (id),
    destination_location_id  INTEGER     NOT NULL REFERENCES data_locations (id),
    transfer_operation_id    BIGINT      NOT NULL UNIQUE REFERENCES operations (id),
    unpack_operation_id      BIGINT      UNIQUE REFERENCES operations (id),
    status                   TEXT        NOT NULL DEFAULT 'pending',
    retry_count              INTEGER     NOT NULL DEFAULT 0,
    unpack_status            TEXT        NOT NULL DEFAULT 'pending',
    unpack_retry_count       INTEGER     NOT NULL DEFAULT 0,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (data_transfer_package_id, destination_location_id)
);

CREATE TABLE long_term_archive_transfers (
    id                  BIGSERIAL   PRIMARY KEY,
    raw_data_package_id UUID        NOT NULL REFERENCES package_states (raw_data_package_id),
    location_id         INTEGER     NOT NULL REFERENCES data_locations (id),
    operation_id        BIGINT      NOT NULL UNIQUE REFERENCES operations (id),
    status              TEXT        NOT NULL DEFAULT 'pending',
    attempt_count       INTEGER     NOT NULL DEFAULT 0,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (raw_data_package_id, location_id)
);

-- Copies of packages that movers reported making.
CREATE TABLE physical_copies (
    id                       BIGSERIAL   PRIMARY KEY,
    raw_data_package_id      UUID        REFERENCES package_states (raw_data_package_id),
    data_transfer_package_id BIGINT      REFERENCES data_transfer_packages (id),
    location_id              INTEGER     NOT NULL REFERENCES data_locations (id),
    path                     TEXT        NOT NULL,
    operation_id             BIGINT      REFERENCES operations (id),
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (location_id, path)
);
CREATE INDEX physical_copies_rdp ON physical_copies (raw_data_package_id) WHERE raw_data_package_id IS NOT NULL;

-- Maintained counts for /overview (fast at any table size): triggers append signed deltas (no
-- row is contended, so concurrent movers never wait on a counter), and every transfer replica
-- folds them into transfer_counters about once a second (DELETE ... RETURNING, exact under
-- concurrency). A read sums both. Keys: op:<kind>:<status>, pkg:<state>, dtp:<state>, and
-- files_registered (set by the planner from raw_data_files).
CREATE TABLE transfer_counters (
    key   TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE transfer_counter_deltas (
    key   TEXT   NOT NULL,
    delta BIGINT NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'op:' || kind || ':' || status, count(*) FROM new_rows GROUP BY kind, status;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT key, sum(d) FROM (
            SELECT 'op:' || o.kind || ':' || o.status AS key, -1 AS d
              FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE n.status <> o.status
            UNION ALL
            SELECT 'op:' || n.kind || ':' || n.status, 1
              FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE n.status <> o.status
        ) c GROUP BY key;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION transfer_count_packages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'pkg:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT key, sum(d) FROM (
            SELECT 'pkg:' || o.state AS key, -1 AS d
              FROM old_rows o JOIN new_rows n USING (raw_data_package_id) WHERE n.state <> o.state
            UNION ALL
            SELECT 'pkg:' || n.state, 1
              FROM old_rows o JOIN new_rows n USING (raw_data_package_id) WHERE n.state <> o.state
        ) c GROUP BY key;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION transfer_count_dtps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'dtp:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT key, sum(d) FROM (
            SELECT 'dtp:' || o.state AS key, -1 AS d
              FROM old_rows o JOIN new_rows n USING (id) WHERE n.state <> o.state
            UNION ALL
            SELECT 'dtp:' || n.state, 1
              FROM old_rows o JOIN new_rows n USING (id) WHERE n.state <> o.state
        ) c GROUP BY key;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operations_count_insert AFTER INSERT ON operations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_operations();
CREATE TRIGGER operations_count_update AFTER UPDATE ON operations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_operations();
CREATE TRIGGER package_states_count_insert AFTER INSERT ON package_states
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_packages();
CREATE TRIGGER package_states_count_update AFTER UPDATE ON package_states
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_packages();
CREATE TRIGGER data_transfer_packages_count_insert AFTER INSERT ON data_transfer_packages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_dtps();
CREATE TRIGGER data_transfer_packages_count_update AFTER UPDATE ON data_transfer_packages
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_dtps();

-- seq of /overview and the WebSocket: one step per published change, strictly increasing.
CREATE SEQUENCE transfer_overview_seq;

-- +goose Down
DROP SEQUENCE transfer_overview_seq;
DROP TABLE transfer_counter_deltas, transfer_counters, physical_copies, long_term_archive_transfers,
    data_transfers, operation_failures, operation_history, operations, staging_jobs,
    data_transfer_package_members, package_states, data_transfer_packages, data_locations, sites CASCADE;
DROP FUNCTION transfer_count_operations(), transfer_count_packages(), transfer_count_dtps(), transfer_append_only();
