-- transfer_make_dtp makes a data transfer package in one call. Called by
-- services/transfer/postgres/packages.go (Store.makeDTP, from the planner's Store.Group).
--
-- Makes a DTP at buffer location loc (at site loc_site) of the packages pkgs, whose ready
-- raw_data_package operations are ops, with total size n_bytes: the DTP row, its members, its
-- data_transfer_package operation (with retries as its max_retries) with its history entry, the
-- packages' DTP and derived state, and their operations marked advanced (grouped). The package
-- rows are locked first, in one order, as every refresh locks them. Raises
-- transfer_make_dtp_raced (P0001) and writes nothing if a package is in a DTP already (another
-- planner grouped it meanwhile). Returns the DTP's id.
--
-- History: 00013.

CREATE OR REPLACE FUNCTION transfer_make_dtp(pkgs uuid[], ops bigint[], loc integer, loc_site integer, n_bytes bigint, retries integer)
RETURNS bigint LANGUAGE plpgsql
-- Generic plans: the arrays' size is not known to the planner, so rows are found by key.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    dtp bigint;
    n   bigint;
BEGIN
    INSERT INTO data_transfer_packages (name, location_id, package_count, size_bytes)
    VALUES ('dtp-' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS') || '-' || substr(md5(random()::text), 1, 8),
            loc, cardinality(pkgs), n_bytes)
    RETURNING id INTO dtp;
    PERFORM 1 FROM package_states p WHERE p.raw_data_package_id = ANY (pkgs) ORDER BY p.raw_data_package_id FOR NO KEY UPDATE;
    WITH op AS (
        INSERT INTO operations (kind, data_transfer_package_id, site_id, source_location_id, destination_location_id, max_retries)
        VALUES ('data_transfer_package', dtp, loc_site, loc, loc, retries)
        ON CONFLICT (data_transfer_package_id) WHERE kind = 'data_transfer_package' DO NOTHING RETURNING id, status)
    INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT op.id, 'created', op.status, 'planner' FROM op;
    -- The DTP and the derived state in one write per package (derived with the DTP's operation
    -- just made, as a refresh after grouping would derive it).
    UPDATE package_states p SET data_transfer_package_id = dtp, state = d.derived, updated_at = now(),
           state_changed_at = CASE WHEN d.derived <> p.state THEN now() ELSE p.state_changed_at END
      FROM (SELECT q.raw_data_package_id AS id, transfer_derived_state(q.raw_data_package_id, dtp) AS derived
              FROM package_states q WHERE q.raw_data_package_id = ANY (pkgs)) d
     WHERE p.raw_data_package_id = d.id AND p.data_transfer_package_id IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(pkgs) THEN
        RAISE EXCEPTION 'transfer_make_dtp_raced: grouping raced with another planner; retried on the next round';
    END IF;
    INSERT INTO data_transfer_package_members (data_transfer_package_id, raw_data_package_id) SELECT dtp, unnest(pkgs);
    -- Grouped is what advanced means for a raw_data_package operation (out of the ready index).
    UPDATE operations o SET advanced = true WHERE o.id = ANY (ops) AND o.kind = 'raw_data_package' AND NOT o.advanced;
    RETURN dtp;
END $$;
