-- transfer_derived_state is the one definition of a raw data package's lifecycle state, derived
-- from its operation chain and its verified copies; package_states.state caches it. Called by
-- transfer_complete_batch and transfer_make_dtp, and from Go by
-- services/transfer/postgres/packages.go (deriveSQL: the refreshes after an operation changes,
-- Store.Reconcile and the reconcile sweep's Store.Inconsistent, planner/sweep.go), so the sweep
-- applies exactly this rule.
--
-- History: 00010, 00020 (FAILED before ARCHIVED; ARCHIVED by the replication rule of verified
-- copies, transfer_replicated, instead of by any completed archive operation or any copy).

-- FAILED if any operation of its chain is FAILED: an operation naming the package (its
-- raw_data_package, long_term_archive and staging operations) or its DTP (data_transfer_package,
-- transfer, unpack), until that operation is reset; else ARCHIVED if the replication rule is met
-- (transfer_replicated); else TRANSFERRING if it belongs to a DTP whose operations are not all
-- done (one not COMPLETED, no unpack yet, or a transfer without its unpack); else WAITING.
CREATE OR REPLACE FUNCTION transfer_derived_state(rdp uuid, dtp bigint) RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM operations o WHERE o.raw_data_package_id = rdp AND o.status = 'FAILED')
       OR (dtp IS NOT NULL AND EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = dtp AND o.status = 'FAILED')) THEN
        RETURN 'FAILED';
    END IF;
    IF transfer_replicated(rdp) THEN
        RETURN 'ARCHIVED';
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

-- transfer_replicated says whether package rdp meets the replication rule (the row of
-- transfer_replication_rule, which the transfer service writes from OPS_ARCHIVE_MIN_COPIES and
-- OPS_ARCHIVE_SITES at start: transfer.Replication in services/transfer/policy.go): counted are
-- its verified copies (physical_copies.verified_at set: the mover's checksum and size matched the
-- package's registered ones) at long-term archive locations, one per location.
--   min_copies NULL (the default): a verified copy at every active long-term archive location
--                                  (and at least one);
--   min_copies N:                  verified copies at N or more long-term archive locations;
-- and in both cases, a verified copy at a long-term archive location of every site in sites.
CREATE OR REPLACE FUNCTION transfer_replicated(rdp uuid) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    want  integer;
    named text[];
    have  integer;
BEGIN
    SELECT r.min_copies, r.sites INTO want, named FROM transfer_replication_rule r;
    SELECT count(DISTINCT c.location_id) INTO have
      FROM physical_copies c JOIN data_locations l ON l.id = c.location_id
     WHERE c.raw_data_package_id = rdp AND c.verified_at IS NOT NULL AND l.role = 'long_term_archive';
    IF have = 0 THEN
        RETURN false;
    END IF;
    IF want IS NULL THEN
        IF EXISTS (SELECT 1 FROM data_locations l WHERE l.role = 'long_term_archive' AND l.active
                      AND NOT EXISTS (SELECT 1 FROM physical_copies c WHERE c.raw_data_package_id = rdp
                                         AND c.location_id = l.id AND c.verified_at IS NOT NULL)) THEN
            RETURN false;
        END IF;
    ELSIF have < want THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM unnest(coalesce(named, '{}')) AS n (site)
                        WHERE NOT EXISTS (SELECT 1 FROM physical_copies c
                                            JOIN data_locations l ON l.id = c.location_id
                                            JOIN sites s ON s.id = l.site_id
                                           WHERE c.raw_data_package_id = rdp AND c.verified_at IS NOT NULL
                                             AND l.role = 'long_term_archive' AND s.name = n.site));
END $$;
