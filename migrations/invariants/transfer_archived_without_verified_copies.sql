-- Raw data packages shown ARCHIVED whose verified long-term archive copies do not meet the replication rule (transfer_replicated).
SELECT p.raw_data_package_id::text AS id,
       'state ARCHIVED, but its verified long-term archive copies (' ||
       coalesce((SELECT string_agg(DISTINCT l.name, ', ' ORDER BY l.name)
                   FROM physical_copies c JOIN data_locations l ON l.id = c.location_id
                  WHERE c.raw_data_package_id = p.raw_data_package_id AND c.verified_at IS NOT NULL
                    AND l.role = 'long_term_archive'), 'none') ||
       ') do not meet the replication rule' AS detail
  FROM package_states p
 WHERE p.state = 'ARCHIVED' AND NOT transfer_replicated(p.raw_data_package_id)
 ORDER BY p.raw_data_package_id
