-- COMPLETED transfer, unpack, long_term_archive and staging operations whose reported checksum or size differs from the registered one (the package's, or the DTP's), and verified copies that differ from it.
SELECT o.kind || '/' || o.id AS id,
       'COMPLETED with ' || coalesce(o.checksum, 'no checksum') || ' (' || coalesce(o.bytes::text, '?') || ' bytes), registered '
       || r.checksum || ' (' || coalesce(r.bytes::text, '?') || ' bytes) for ' || r.subject AS detail
  FROM operations o
  JOIN LATERAL (SELECT p.checksum, p.size_bytes AS bytes, 'package ' || p.id AS subject FROM raw_data_packages p
                 WHERE o.kind IN ('long_term_archive', 'staging') AND p.id = o.raw_data_package_id
                UNION ALL
                SELECT d.checksum, d.built_size_bytes, 'data transfer package ' || d.id FROM data_transfer_packages d
                 WHERE o.kind IN ('transfer', 'unpack') AND d.id = o.data_transfer_package_id AND d.checksum IS NOT NULL) r ON true
 WHERE o.status = 'COMPLETED'
   AND (lower(o.checksum) IS DISTINCT FROM lower(r.checksum) OR o.bytes IS DISTINCT FROM r.bytes)
UNION ALL
SELECT 'physical_copy/' || c.id,
       'verified copy ' || l.name || ':' || c.path || ' has ' || c.checksum || ' (' || c.size_bytes || ' bytes), package '
       || p.id || ' is registered as ' || p.checksum || ' (' || p.size_bytes || ' bytes)'
  FROM physical_copies c JOIN data_locations l ON l.id = c.location_id JOIN raw_data_packages p ON p.id = c.raw_data_package_id
 WHERE c.verified_at IS NOT NULL AND c.data_transfer_package_id IS NULL
   AND (lower(c.checksum) IS DISTINCT FROM lower(p.checksum) OR c.size_bytes IS DISTINCT FROM p.size_bytes)
ORDER BY 1
