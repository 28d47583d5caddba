-- transfer_complete_batch completes a batch of movers' reports in one call (one round trip, one
-- statement per table for the whole batch). Called by services/transfer/postgres/complete.go
-- (completeSQL: Store.CompleteAll, which Store.Complete and the Completer's batches use).
--
-- Request k is operation op_ids[k] for holder holders[k] with n_bytes[k] and sums[k] (the size
-- and checksum of what the mover wrote; services/transfer checks both were sent,
-- transfer.CheckCompleteReport) and the physical copies copies[k] (a JSON array of
-- [location, path] pairs). Each request's outcome is its own:
--   ok;
--   not_found;
--   conflict      not IN_PROGRESS or leased to another holder: locked_status and locked_holder
--                 say which — the rule of transfer.CheckReport in services/transfer/policy.go;
--   location      copy bad_copy (0-based) names no data location;
--   copy_missing  a long_term_archive operation reports no copy at its destination location
--                 (transfer.CheckArchiveCopy);
--   mismatch      the reported checksum or size differs from the registered one
--                 (registered_checksum, registered_bytes): the rule of transfer.CheckVerified —
--                 a long_term_archive or staging operation against its package's (ingest's
--                 raw_data_packages.checksum and size_bytes), a transfer or unpack against its
--                 DTP's (data_transfer_packages.checksum and built_size_bytes, which the
--                 completion of the DTP's data_transfer_package operation registers here). The
--                 store then records the attempt as a failure of type checksum_mismatch
--                 (Store.Fail, the retry policy's decision); never COMPLETED.
-- These rules are applied here so that a batch is judged in its one round trip. Requests not ok
-- write nothing. The ok ones are written set-based: operations COMPLETED, history entries, the
-- DTP's registered checksum and size, copies (with the reported checksum and size, and
-- verified_at when a registered checksum was matched), legacy mirror, then the package states
-- their chains decide (written only where they changed). locked_updated_at is each operation's
-- updated_at when it was locked, so a caller reading the row in the same statement (its
-- snapshot) knows whether it read that version. The operation ids must be distinct.
--
-- Package states are locked and derived only for the completes that can change one: a
-- long_term_archive operation, an operation of a DTP (its members), or one that records
-- physical copies. A raw_data_package or staging operation completing without copies changes no
-- term of transfer_derived_state, so such a batch (the usual one) locks and derives no package.
--
-- History: 00011 (replaced transfer_complete of 00010), 00012 (judged in the locking statement;
-- packages derived only where a complete can change them), 00020 (verified against the
-- registered checksum and size; registered_checksum and registered_bytes answered).

CREATE OR REPLACE FUNCTION transfer_complete_batch(op_ids bigint[], holders text[], n_bytes bigint[], sums text[], copies text[])
RETURNS TABLE (i integer, outcome text, locked_status text, locked_holder text, bad_copy integer, locked_updated_at timestamptz,
               registered_checksum text, registered_bytes bigint)
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
    res_sum    text[];
    res_size   bigint[];
    n_distinct bigint;
    ok_ids     bigint[];
    ok_kinds   text[];
    ok_attempt integer[];
    ok_k       integer[];
    ok_dtp     bigint[];
    rdps       uuid[];
    dtps       bigint[];
    pkgs       uuid[];
    chg_ids    uuid[];
    chg_states text[];
BEGIN
    -- Locked in id order (concurrent batches wait for each other instead of deadlocking) and
    -- judged in the same statement: FOR UPDATE answers each row as it is once locked (the
    -- latest committed version), so the lease checks see what a batch they waited for wrote.
    -- The registered checksum and size (g) are looked up only for the kinds verified.
    SELECT array_agg(x.k ORDER BY x.k), array_agg(x.outcome ORDER BY x.k), array_agg(x.status ORDER BY x.k),
           array_agg(x.holder ORDER BY x.k), array_agg(x.bad ORDER BY x.k), array_agg(x.at ORDER BY x.k),
           array_agg(x.reg_sum ORDER BY x.k), array_agg(x.reg_bytes ORDER BY x.k), count(DISTINCT x.id)
      INTO res_i, res_out, res_status, res_holder, res_bad, res_at, res_sum, res_size, n_distinct
      FROM (SELECT r.k::integer AS k, r.id,
                   CASE WHEN o.id IS NULL THEN 'not_found'
                        WHEN o.status <> 'IN_PROGRESS' OR o.lease_holder IS DISTINCT FROM r.holder THEN 'conflict'
                        WHEN r.cps <> '[]' AND (SELECT min(c.n) FROM json_array_elements(r.cps::json) WITH ORDINALITY AS c (v, n)
                                                 WHERE NOT EXISTS (SELECT 1 FROM data_locations l WHERE l.name = c.v->>0)) IS NOT NULL
                             THEN 'location'
                        WHEN o.kind = 'long_term_archive'
                             AND NOT EXISTS (SELECT 1 FROM json_array_elements(r.cps::json) AS c (v)
                                               JOIN data_locations l ON l.name = c.v->>0 WHERE l.id = o.destination_location_id)
                             THEN 'copy_missing'
                        WHEN g.sum IS NOT NULL AND (lower(r.sum) IS DISTINCT FROM lower(g.sum) OR r.n IS DISTINCT FROM g.n)
                             THEN 'mismatch'
                        ELSE 'ok' END AS outcome,
                   o.status, o.lease_holder AS holder, o.updated_at AS at, g.sum AS reg_sum, g.n AS reg_bytes,
                   CASE WHEN r.cps <> '[]' THEN
                        (SELECT min(c.n)::integer - 1 FROM json_array_elements(r.cps::json) WITH ORDINALITY AS c (v, n)
                          WHERE NOT EXISTS (SELECT 1 FROM data_locations l WHERE l.name = c.v->>0)) END AS bad
              FROM unnest(op_ids, holders, copies, sums, n_bytes) WITH ORDINALITY AS r (id, holder, cps, sum, n, k)
              LEFT JOIN (SELECT o.id, o.status, o.lease_holder, o.updated_at, o.kind, o.raw_data_package_id,
                                o.data_transfer_package_id, o.destination_location_id FROM operations o
                          WHERE o.id = ANY (op_ids) ORDER BY o.id FOR UPDATE) o ON o.id = r.id
              LEFT JOIN LATERAL (
                    SELECT p.checksum AS sum, p.size_bytes AS n FROM raw_data_packages p
                     WHERE o.kind IN ('long_term_archive', 'staging') AND p.id = o.raw_data_package_id
                    UNION ALL
                    SELECT d.checksum, d.built_size_bytes FROM data_transfer_packages d
                     WHERE o.kind IN ('transfer', 'unpack') AND d.id = o.data_transfer_package_id AND d.checksum IS NOT NULL
                   ) g ON true) x;
    IF n_distinct <> cardinality(op_ids) THEN
        RAISE EXCEPTION 'transfer_complete_batch: operation ids must be distinct';
    END IF;
    IF NOT 'ok' = ANY (res_out) THEN
        RETURN QUERY SELECT * FROM unnest(res_i, res_out, res_status, res_holder, res_bad, res_at, res_sum, res_size);
        RETURN;
    END IF;

    -- rdps: the packages whose state one of these completes may change. Completing an operation
    -- (IN_PROGRESS -> COMPLETED) changes a derivation (transfer_derived_state) only through a
    -- long_term_archive operation completing, a DTP's operation completing (its members'
    -- states: dtps) or a physical copy recorded; a raw_data_package or staging operation without
    -- copies leaves its package's state as it was, so such a batch (the usual one) locks and
    -- derives no package at all.
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
    SELECT array_agg(u.id), array_agg(u.kind), array_agg(u.attempt), array_agg(u.k), array_agg(u.data_transfer_package_id),
           array_agg(u.raw_data_package_id) FILTER (WHERE u.raw_data_package_id IS NOT NULL
               AND (u.kind = 'long_term_archive' OR u.data_transfer_package_id IS NOT NULL OR copies[u.k] <> '[]')),
           array_agg(u.data_transfer_package_id) FILTER (WHERE u.data_transfer_package_id IS NOT NULL)
      INTO ok_ids, ok_kinds, ok_attempt, ok_k, ok_dtp, rdps, dtps FROM u;

    -- A completed data_transfer_package operation registers its DTP's checksum and size: what
    -- the DTP's transfers and unpacks are verified against.
    IF 'data_transfer_package' = ANY (ok_kinds) THEN
        UPDATE data_transfer_packages d SET checksum = sums[u.k], built_size_bytes = n_bytes[u.k], updated_at = now()
          FROM unnest(ok_kinds, ok_k, ok_dtp) AS u (kind, k, dtp) WHERE u.kind = 'data_transfer_package' AND d.id = u.dtp;
    END IF;
    -- Copies, with what the mover reported of them; verified_at when it matched a registration.
    -- A copy reported again at the same place (a retry after a reset) takes the new report.
    IF EXISTS (SELECT 1 FROM unnest(ok_k) k WHERE copies[k] <> '[]') THEN
        INSERT INTO physical_copies (raw_data_package_id, data_transfer_package_id, location_id, path, operation_id,
                                     checksum, size_bytes, verified_at)
        SELECT DISTINCT ON (l.id, c.v->>1) o.raw_data_package_id, o.data_transfer_package_id, l.id, c.v->>1, o.id,
               sums[u.k], n_bytes[u.k], CASE WHEN res_sum[u.k] IS NOT NULL THEN now() END
          FROM unnest(ok_ids, ok_k) AS u (id, k) JOIN operations o ON o.id = u.id
         CROSS JOIN LATERAL json_array_elements(copies[u.k]::json) AS c (v) JOIN data_locations l ON l.name = c.v->>0
         ORDER BY l.id, c.v->>1, u.k DESC
        ON CONFLICT (location_id, path) DO UPDATE SET raw_data_package_id = excluded.raw_data_package_id,
               data_transfer_package_id = excluded.data_transfer_package_id, operation_id = excluded.operation_id,
               checksum = excluded.checksum, size_bytes = excluded.size_bytes, verified_at = excluded.verified_at;
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

    -- The package states these chains decide: the packages above and their DTPs' members,
    -- locked first in one order (overlapping refreshes wait instead of deadlocking), then derived
    -- in a statement of their own (a snapshot that sees what a complete they waited for
    -- committed), and written only where they changed.
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
    RETURN QUERY SELECT * FROM unnest(res_i, res_out, res_status, res_holder, res_bad, res_at, res_sum, res_size);
END $$;
