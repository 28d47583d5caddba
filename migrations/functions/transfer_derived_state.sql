-- transfer_derived_state is the one definition of a raw data package's lifecycle state, derived
-- from its operation chain; package_states.state caches it. Called by transfer_complete_batch and
-- transfer_make_dtp, and from Go by services/transfer/postgres/packages.go (deriveSQL: the
-- refreshes after an operation changes, Store.Reconcile and the consistency sweep's
-- Store.Inconsistent).
--
-- History: 00010.

-- ARCHIVED if a long_term_archive operation of the package completed or a copy of it is at a
-- long-term archive location; else FAILED if any operation of its chain (its raw_data_package and
-- long_term_archive operations, its DTP's data_transfer_package, transfer and unpack operations)
-- is FAILED; else TRANSFERRING if it belongs to a DTP whose operations are not all done (one not
-- COMPLETED, no unpack yet, or a transfer without its unpack); else WAITING.
CREATE OR REPLACE FUNCTION transfer_derived_state(rdp uuid, dtp bigint) RETURNS text LANGUAGE plpgsql STABLE AS $$
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
