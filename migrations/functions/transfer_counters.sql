-- The overview counters' trigger functions: each appends signed deltas to transfer_counter_deltas
-- (no contended row, so concurrent writers never wait on a counter). Every transfer replica folds
-- the deltas into transfer_counters about once a second, and GET /overview adds the pending ones
-- (services/transfer/postgres/lists.go: Store.FoldCounters, Store.Counters).
--
--   transfer_count_operations  op:<kind>:<status>   operations             AFTER INSERT, AFTER UPDATE
--   transfer_count_packages    pkg:<state>          package_states         AFTER INSERT, AFTER UPDATE
--   transfer_count_dtps        dtp:<state>          data_transfer_packages AFTER INSERT, AFTER UPDATE
--   transfer_count_files       files_registered     raw_data_files         AFTER INSERT, DELETE, TRUNCATE
--   transfer_count_failures    failures:<type>      operation_failures     AFTER INSERT
--
-- The triggers are statement-level with transition tables (new_rows, old_rows), so a statement
-- costs one insert of a few rows whatever it changed. An UPDATE counts its old rows -1 and its
-- new rows +1 under their keys, grouped without a join (a row that kept its status adds nothing),
-- and writes only the keys whose sum is not 0. raw_data_files is ingest's table: the trigger on
-- it belongs to transfer, whose overview the count is; TRUNCATE resets the counter.
--
-- History: 00008 (triggers and first bodies), 00011 (transfer_count_files; operations rewritten),
-- 00014 (operations, packages, dtps without a join), 00021 (transfer_count_failures).

CREATE OR REPLACE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'op:' || kind || ':' || status, count(*) FROM new_rows GROUP BY kind, status;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'op:' || kind || ':' || status AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'op:' || kind || ':' || status, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_packages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'pkg:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'pkg:' || state AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'pkg:' || state, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_dtps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'dtp:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'dtp:' || state AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'dtp:' || state, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_files() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta) SELECT 'files_registered', count(*) FROM new_rows HAVING count(*) > 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO transfer_counter_deltas (key, delta) SELECT 'files_registered', -count(*) FROM old_rows HAVING count(*) > 0;
    ELSE -- TRUNCATE
        DELETE FROM transfer_counter_deltas WHERE key = 'files_registered';
        UPDATE transfer_counters SET value = 0 WHERE key = 'files_registered';
    END IF;
    RETURN NULL;
END $$;
-- transfer_count_failures keeps failures:<error_type> (operation_failures AFTER INSERT, from
-- 00021): every failed attempt recorded, by its type (checksum_mismatch, stalled, or what a
-- mover reported), exported as obsops_transfer_operation_failures_total (services/transfer
-- planner/metrics.go). operation_failures is append-only, so the counter only grows.
CREATE OR REPLACE FUNCTION transfer_count_failures() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transfer_counter_deltas (key, delta)
    SELECT 'failures:' || error_type, count(*) FROM new_rows GROUP BY error_type;
    RETURN NULL;
END $$;
