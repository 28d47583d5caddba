-- Issue 13, throughput: the planner's per-round work no longer grows with completed operations,
-- and the overview's files_registered is a maintained counter instead of a count(*).
--
-- 1. `advanced` means "the planner has made what follows this operation". For raw_data_package
--    operations what follows is their data transfer package: they stay NOT advanced until
--    grouped, so the packages ready to group are read from a small partial index in completion
--    order instead of joining every package without a DTP to every completed operation. The
--    leaf kinds (long_term_archive, staging) have nothing to follow and are never advanced: the
--    complete that ends them already stored the package states, so the planner no longer spends a
--    transaction per completed leaf operation. operations_to_advance holds only the kinds with
--    successors (data_transfer_package, transfer, unpack).
--
-- 2. files_registered: a statement-level trigger on ingest's raw_data_files appends the signed
--    number of rows each INSERT or DELETE changed to transfer_counter_deltas (folded like every
--    other counter; exact under concurrency, no contended row). raw_data_files belongs to ingest;
--    the trigger lives with the transfer schema because the count is transfer's (the overview
--    funnel), costs ingest one small insert per batch statement, and frees the planner from a
--    count(*) over the whole table every few seconds. TRUNCATE resets the counter.
--
-- 3. Movers' completes are written in batches (the service's Completer gathers the ones that
--    arrive together): transfer_complete_batch replaces transfer_complete (00010) with the same
--    outcomes per request, written set-based — one statement per table per batch, so the
--    statement-level counter triggers fire once per batch — and package states written only
--    where they changed (the usual complete changes none). The operations counter trigger
--    compares old and new rows in one join instead of two.

-- +goose Up
DROP INDEX operations_to_advance;
CREATE INDEX operations_to_advance ON operations (id)
    WHERE status = 'COMPLETED' AND NOT advanced AND kind IN ('data_transfer_package', 'transfer', 'unpack');
CREATE INDEX operations_to_group ON operations (completed_at, id)
    WHERE kind = 'raw_data_package' AND status = 'COMPLETED' AND NOT advanced;
-- Completed raw_data_package operations whose package is in no DTP yet are ready to group.
UPDATE operations o SET advanced = (p.data_transfer_package_id IS NOT NULL)
  FROM package_states p
 WHERE o.kind = 'raw_data_package' AND p.raw_data_package_id = o.raw_data_package_id
   AND o.advanced <> (p.data_transfer_package_id IS NOT NULL);

-- +goose StatementBegin
CREATE FUNCTION transfer_count_files() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- Completes a batch of movers' reports in one call: request k is operation op_ids[k] for holder
-- holders[k] with n_bytes[k], sums[k] and the physical copies copies[k] (a JSON array of
-- [location, path] pairs). Each request's outcome is its own, as transfer_complete (00010) had
-- it: ok; not_found; conflict (not IN_PROGRESS or leased to another holder: locked_status and
-- locked_holder say which); location (copy bad_copy, 0-based, names no data location). Requests
-- not ok write nothing. The ok ones are written set-based, one statement per table for the whole
-- batch: operations COMPLETED, history entries, copies, legacy mirror, then the package states
-- their chains decide (their packages and their DTPs' members, locked in one order, derived, and
-- written only where they changed). locked_updated_at is each operation's updated_at when it was
-- locked, so a caller reading the row in the same statement (its snapshot) knows whether it read
-- that version. The operation ids must be distinct.
CREATE FUNCTION transfer_complete_batch(op_ids bigint[], holders text[], n_bytes bigint[], sums text[], copies text[])
RETURNS TABLE (i integer, outcome text, locked_status text, locked_holder text, bad_copy integer, locked_updated_at timestamptz)
LANGUAGE plpgsql ROWS 64
-- Generic plans: the statements below are planned once per connection, not at every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    res_i      integer[];
    res_out    text[];
    res_status text[];
    res_holder text[];
    res_bad    integer[];
    res_at     timestamptz[];
    n_distinct bigint;
    ok_ids     bigint[];
    ok_kinds   text[];
    ok_attempt integer[];
    ok_k       integer[];
    rdps       uuid[];
    dtps       bigint[];
    pkgs       uuid[];
    chg_ids    uuid[];
    chg_states text[];
BEGIN
    -- Locked in id order: concurrent batches wait for each other instead of deadlocking.
    PERFORM 1 FROM operations o WHERE o.id = ANY (op_ids) ORDER BY o.id FOR UPDATE;

    -- Outcomes against the locked rows (a statement of its own: it sees them as locked).
    SELECT array_agg(x.k ORDER BY x.k), array_agg(x.outcome ORDER BY x.k), array_agg(x.status ORDER BY x.k),
           array_agg(x.holder ORDER BY x.k), array_agg(x.bad ORDER BY x.k), array_agg(x.at ORDER BY x.k), count(DISTINCT x.id)
      INTO res_i, res_out, res_status, res_holder, res_bad, res_at, n_distinct
      FROM (SELECT r.k::integer AS k, r.id,
                   CASE WHEN o.id IS NULL THEN 'not_found'
                        WHEN o.status <> 'IN_PROGRESS' OR o.lease_holder IS DISTINCT FROM r.holder THEN 'conflict'
                        WHEN r.cps <> '[]' AND (SELECT min(c.n) FROM json_array_elements(r.cps::json) WITH ORDINALITY AS c (v, n)
                                                 WHERE NOT EXISTS (SELECT 1 FROM data_locations l WHERE l.name = c.v->>0)) IS NOT NULL
                             THEN 'location'
                        ELSE 'ok' END AS outcome,
                   o.status, o.lease_holder AS holder, o.updated_at AS at,
                   CASE WHEN r.cps <> '[]' THEN
                        (SELECT min(c.n)::integer - 1 FROM json_array_elements(r.cps::json) WITH ORDINALITY AS c (v, n)
                          WHERE NOT EXISTS (SELECT 1 FROM data_locations l WHERE l.name = c.v->>0)) END AS bad
              FROM unnest(op_ids, holders, copies) WITH ORDINALITY AS r (id, holder, cps, k)
              LEFT JOIN operations o ON o.id = r.id) x;
    IF n_distinct <> cardinality(op_ids) THEN
        RAISE EXCEPTION 'transfer_complete_batch: operation ids must be distinct';
    END IF;
    IF NOT 'ok' = ANY (res_out) THEN
        RETURN QUERY SELECT * FROM unnest(res_i, res_out, res_status, res_holder, res_bad, res_at);
        RETURN;
    END IF;

    WITH ok AS (
        SELECT op_ids[t.k] AS id, t.k FROM unnest(res_i, res_out) AS t (k, outcome) WHERE t.outcome = 'ok'),
    u AS (
        UPDATE operations o SET status = 'COMPLETED', bytes = n_bytes[ok.k], checksum = nullif(sums[ok.k], ''),
               completed_at = now(), lease_holder = NULL, lease_expires_at = NULL, updated_at = now()
          FROM ok WHERE o.id = ok.id
        RETURNING o.id, ok.k, o.kind, o.attempt, o.retry_count, o.raw_data_package_id, o.data_transfer_package_id),
    h AS (
        INSERT INTO operation_history (operation_id, event, from_status, to_status, actor, attempt, retry_count)
        SELECT u.id, 'completed', 'IN_PROGRESS', 'COMPLETED', holders[u.k], u.attempt, u.retry_count FROM u)
    SELECT array_agg(u.id), array_agg(u.kind), array_agg(u.attempt), array_agg(u.k),
           array_agg(u.raw_data_package_id) FILTER (WHERE u.raw_data_package_id IS NOT NULL),
           array_agg(u.data_transfer_package_id) FILTER (WHERE u.data_transfer_package_id IS NOT NULL)
      INTO ok_ids, ok_kinds, ok_attempt, ok_k, rdps, dtps FROM u;

    IF EXISTS (SELECT 1 FROM unnest(ok_k) k WHERE copies[k] <> '[]') THEN
        INSERT INTO physical_copies (raw_data_package_id, data_transfer_package_id, location_id, path, operation_id)
        SELECT o.raw_data_package_id, o.data_transfer_package_id, l.id, c.v->>1, o.id
          FROM unnest(ok_ids, ok_k) AS u (id, k) JOIN operations o ON o.id = u.id
         CROSS JOIN LATERAL json_array_elements(copies[u.k]::json) AS c (v) JOIN data_locations l ON l.name = c.v->>0
        ON CONFLICT (location_id, path) DO NOTHING;
    END IF;
    -- The legacy mirror (only transfer, unpack and long_term_archive operations have legacy rows).
    IF 'transfer' = ANY (ok_kinds) THEN
        UPDATE data_transfers d SET status = 'completed', retry_count = u.attempt, updated_at = now()
          FROM unnest(ok_ids, ok_kinds, ok_attempt) AS u (id, kind, attempt) WHERE u.kind = 'transfer' AND d.transfer_operation_id = u.id;
    END IF;
    IF 'unpack' = ANY (ok_kinds) THEN
        UPDATE data_transfers d SET unpack_status = 'completed', unpack_retry_count = u.attempt, updated_at = now()
          FROM unnest(ok_ids, ok_kinds, ok_attempt) AS u (id, kind, attempt) WHERE u.kind = 'unpack' AND d.unpack_operation_id = u.id;
    END IF;
    IF 'long_term_archive' = ANY (ok_kinds) THEN
        UPDATE long_term_archive_transfers a SET status = 'completed', attempt_count = u.attempt, updated_at = now()
          FROM unnest(ok_ids, ok_kinds, ok_attempt) AS u (id, kind, attempt) WHERE u.kind = 'long_term_archive' AND a.operation_id = u.id;
    END IF;

    -- The package states these chains decide: the operations' own packages and their DTPs'
    -- members, locked first in one order (overlapping refreshes wait instead of deadlocking),
    -- then derived in a statement of their own (a snapshot that sees what a complete they waited
    -- for committed), and written only where they changed: the usual complete changes no state
    -- and so runs no UPDATE and no counter trigger for it.
    IF dtps IS NULL THEN
        pkgs := rdps;
    ELSE
        pkgs := ARRAY(SELECT unnest(rdps) UNION
                      SELECT m.raw_data_package_id FROM data_transfer_package_members m WHERE m.data_transfer_package_id = ANY (dtps));
    END IF;
    IF pkgs IS NOT NULL THEN
        PERFORM 1 FROM package_states p WHERE p.raw_data_package_id = ANY (pkgs) ORDER BY p.raw_data_package_id FOR NO KEY UPDATE;
        SELECT array_agg(d.id), array_agg(d.derived) INTO chg_ids, chg_states
          FROM (SELECT q.raw_data_package_id AS id, q.state,
                       transfer_derived_state(q.raw_data_package_id, q.data_transfer_package_id) AS derived
                  FROM package_states q WHERE q.raw_data_package_id = ANY (pkgs)) d
         WHERE d.state <> d.derived;
        IF chg_ids IS NOT NULL THEN
            UPDATE package_states p SET state = c.state, state_changed_at = now(), updated_at = now()
              FROM unnest(chg_ids, chg_states) AS c (id, state) WHERE p.raw_data_package_id = c.id;
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM unnest(res_i, res_out, res_status, res_holder, res_bad, res_at);
END $$;

CREATE OR REPLACE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'op:' || kind || ':' || status, count(*) FROM new_rows GROUP BY kind, status;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM old_rows o JOIN new_rows n ON n.id = o.id
         CROSS JOIN LATERAL (VALUES ('op:' || o.kind || ':' || o.status, -1), ('op:' || n.kind || ':' || n.status, 1)) c (key, d)
         WHERE n.status <> o.status GROUP BY c.key;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
DROP FUNCTION transfer_complete(bigint, text, bigint, text, text[], text[]);
CREATE TRIGGER raw_data_files_count_insert AFTER INSERT ON raw_data_files
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_files();
CREATE TRIGGER raw_data_files_count_delete AFTER DELETE ON raw_data_files
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_files();
CREATE TRIGGER raw_data_files_count_truncate AFTER TRUNCATE ON raw_data_files
    FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_files();
-- The starting value, counted once under the trigger's lock (CREATE TRIGGER holds SHARE ROW
-- EXCLUSIVE on raw_data_files until this migration commits, so no insert slips in between).
DELETE FROM transfer_counter_deltas WHERE key = 'files_registered';
INSERT INTO transfer_counters (key, value) SELECT 'files_registered', count(*) FROM raw_data_files
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;

-- +goose Down
DROP FUNCTION transfer_complete_batch(bigint[], text[], bigint[], text[], text[]);
-- +goose StatementBegin
CREATE FUNCTION transfer_complete(op_id bigint, holder text, n_bytes bigint, sum text,
                                  copy_locations text[], copy_paths text[])
RETURNS TABLE (outcome text, locked_status text, locked_holder text, bad_copy integer, locked_updated_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    cur  operations%ROWTYPE;
    locs integer[] := '{}';
    loc  integer;
    i    integer;
BEGIN
    SELECT * INTO cur FROM operations o WHERE o.id = op_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found', NULL::text, NULL::text, NULL::integer, NULL::timestamptz;
        RETURN;
    END IF;
    IF cur.status <> 'IN_PROGRESS' OR cur.lease_holder IS DISTINCT FROM holder THEN
        RETURN QUERY SELECT 'conflict', cur.status, cur.lease_holder, NULL::integer, cur.updated_at;
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(array_length(copy_locations, 1), 0) LOOP
        SELECT l.id INTO loc FROM data_locations l WHERE l.name = copy_locations[i];
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'location', cur.status, cur.lease_holder, i - 1, cur.updated_at;
            RETURN;
        END IF;
        locs := locs || loc;
    END LOOP;

    UPDATE operations o SET status = 'COMPLETED', bytes = n_bytes, checksum = nullif(sum, ''), completed_at = now(),
           lease_holder = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE o.id = op_id;
    INSERT INTO operation_history (operation_id, event, from_status, to_status, actor, attempt, retry_count)
    VALUES (op_id, 'completed', 'IN_PROGRESS', 'COMPLETED', holder, cur.attempt, cur.retry_count);
    IF array_length(locs, 1) > 0 THEN
        INSERT INTO physical_copies (raw_data_package_id, data_transfer_package_id, location_id, path, operation_id)
        SELECT cur.raw_data_package_id, cur.data_transfer_package_id, c.loc, c.path, op_id
          FROM unnest(locs, copy_paths) AS c (loc, path)
        ON CONFLICT (location_id, path) DO NOTHING;
    END IF;

    -- The legacy mirror (only transfer, unpack and long_term_archive operations have legacy rows).
    IF cur.kind = 'transfer' THEN
        UPDATE data_transfers SET status = 'completed', retry_count = cur.attempt, updated_at = now() WHERE transfer_operation_id = op_id;
    ELSIF cur.kind = 'unpack' THEN
        UPDATE data_transfers SET unpack_status = 'completed', unpack_retry_count = cur.attempt, updated_at = now() WHERE unpack_operation_id = op_id;
    ELSIF cur.kind = 'long_term_archive' THEN
        UPDATE long_term_archive_transfers SET status = 'completed', attempt_count = cur.attempt, updated_at = now() WHERE operation_id = op_id;
    END IF;

    -- The package states this operation's chain decides: its own package, or its DTP's members
    -- (locked first, in one order, so overlapping refreshes wait instead of deadlocking).
    IF cur.raw_data_package_id IS NOT NULL AND cur.data_transfer_package_id IS NULL THEN
        UPDATE package_states p SET state = d.derived, state_changed_at = now(), updated_at = now()
          FROM (SELECT transfer_derived_state(q.raw_data_package_id, q.data_transfer_package_id) AS derived
                  FROM package_states q WHERE q.raw_data_package_id = cur.raw_data_package_id) d
         WHERE p.raw_data_package_id = cur.raw_data_package_id AND p.state <> d.derived;
    ELSE
        PERFORM 1 FROM package_states p
          WHERE p.raw_data_package_id IN (SELECT cur.raw_data_package_id WHERE cur.raw_data_package_id IS NOT NULL
                                           UNION
                                           SELECT m.raw_data_package_id FROM data_transfer_package_members m
                                            WHERE m.data_transfer_package_id = cur.data_transfer_package_id)
          ORDER BY p.raw_data_package_id FOR NO KEY UPDATE;
        UPDATE package_states p SET state = d.derived, state_changed_at = now(), updated_at = now()
          FROM (SELECT q.raw_data_package_id AS id, transfer_derived_state(q.raw_data_package_id, q.data_transfer_package_id) AS derived
                  FROM package_states q
                 WHERE q.raw_data_package_id IN (SELECT cur.raw_data_package_id WHERE cur.raw_data_package_id IS NOT NULL
                                                  UNION
                                                  SELECT m.raw_data_package_id FROM data_transfer_package_members m
                                                   WHERE m.data_transfer_package_id = cur.data_transfer_package_id)) d
         WHERE p.raw_data_package_id = d.id AND p.state <> d.derived;
    END IF;
    RETURN QUERY SELECT 'ok', 'COMPLETED'::text, NULL::text, NULL::integer, cur.updated_at;
END $$;

CREATE OR REPLACE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
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
-- +goose StatementEnd
DROP TRIGGER raw_data_files_count_truncate ON raw_data_files;
DROP TRIGGER raw_data_files_count_delete ON raw_data_files;
DROP TRIGGER raw_data_files_count_insert ON raw_data_files;
DROP FUNCTION transfer_count_files();
DROP INDEX operations_to_group;
DROP INDEX operations_to_advance;
CREATE INDEX operations_to_advance ON operations (id) WHERE status = 'COMPLETED' AND NOT advanced;
UPDATE operations SET advanced = true WHERE kind IN ('raw_data_package', 'long_term_archive', 'staging') AND status = 'COMPLETED' AND NOT advanced;
