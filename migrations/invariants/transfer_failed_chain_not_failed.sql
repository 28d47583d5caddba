-- Raw data packages with a FAILED operation on their chain (their own operations or their DTP's) whose state is not FAILED.
SELECT p.raw_data_package_id::text AS id,
       'state ' || p.state || ', but ' || o.kind || ' operation ' || o.id || ' of its chain is FAILED' AS detail
  FROM package_states p
  JOIN LATERAL (SELECT o.id, o.kind FROM operations o
                 WHERE o.status = 'FAILED'
                   AND (o.raw_data_package_id = p.raw_data_package_id
                        OR (p.data_transfer_package_id IS NOT NULL AND o.data_transfer_package_id = p.data_transfer_package_id))
                 ORDER BY o.id LIMIT 1) o ON true
 WHERE p.state <> 'FAILED'
 ORDER BY p.raw_data_package_id
