-- Acknowledged ingest records the worker kept aside because another record holds their path, file or package name (writes acknowledged by two sites' separate buffers).
SELECT c.record_id::text AS id,
       c.kind || ': ' || c.detail || ' (tx ' || COALESCE(c.tx::text, '?') || ', at ' || c.created_at || ')' AS detail
FROM ingest_collisions c
ORDER BY c.id
