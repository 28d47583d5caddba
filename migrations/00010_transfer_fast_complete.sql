-- A mover's "complete" in one round trip (issue 13: claim/complete throughput). The work is the
-- same as before, in the same transaction (the function's call): lock the operation, check its
-- lease, mark it COMPLETED, append its history entry, record the physical copies, mirror the
-- outcome into the legacy row and recompute the package states it affects. Plans are cached per
-- connection by PL/pgSQL instead of being planned again for every statement sent.
--
-- transfer_derived_state is the one definition of a package's lifecycle state derived from its
-- operation chain; the service's refreshes and consistency sweep call it too.

-- +goose Up
-- +goose StatementBegin
-- ARCHIVED if a long_term_archive operation of the package completed or a copy of it is at a
-- long-term archive location; else FAILED if any operation of its chain (its raw_data_package and
-- long_term_archive operations, its DTP's data_transfer_package, transfer and unpack operations)
-- is FAILED; else TRANSFERRING if it belongs to a DTP whose operations are not all done (one not
-- COMPLETED, no unpack yet, or a transfer without its unpack); else WAITING.
CREATE FUNCTION transfer_derived_state(rdp uuid, dtp bigint) RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM operations o WHERE o.raw_data_package_id = rdp
                  AND o.kind = 'long_term_archive' AND o.status = 'COMPLETED')
       OR EXISTS (SELECT 1 FROM physical_copies c JOIN data_locations l ON l.id = c.location_id
                   WHERE c.raw_data_package_id = rdp AND l.role = 'long_term_archive') THEN
        RETURN 'ARCHIVED';
    END IF;
    IF EXISTS (SELECT 1 FROM operations o WHERE o.raw_data_package_id = rdp
                  AND o.kind IN ('raw_data_package', 'long_term_archive') AND o.status = 'FAILED')
       OR (dtp IS NOT NULL AND EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = dtp AND o.status = 'FAILED')) THEN
        RETURN 'FAILED';
    END IF;
    IF dtp IS NOT NULL AND (
           EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = dtp AND o.status <> 'COMPLETED')
        OR NOT EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = dtp AND o.kind = 'unpack')
        OR EXISTS (SELECT 1 FROM operations t WHERE t.data_transfer_package_id = dtp AND t.kind = 'transfer'
                     AND NOT EXISTS (SELECT 1 FROM operations u WHERE u.data_transfer_package_id = dtp
                                        AND u.kind = 'unpack' AND u.destination_location_id = t.destination_location_id))) THEN
        RETURN 'TRANSFERRING';
    END IF;
    RETURN 'WAITING';
END $$;

-- Completes operation op_id for holder. outcome: ok; not_found; conflict (not IN_PROGRESS or
-- leased to another holder: locked_status and locked_holder say which); location
-- (copy_locations[bad_copy], 0-based, names no data location). Nothing is written unless outcome
-- is ok. locked_updated_at is the operation's updated_at when it was locked, so a caller reading
-- the row in the same statement (the statement's snapshot) knows whether it read that version.
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
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION transfer_complete(bigint, text, bigint, text, text[], text[]);
DROP FUNCTION transfer_derived_state(uuid, bigint);
