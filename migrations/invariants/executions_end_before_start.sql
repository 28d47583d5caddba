-- Executions that end before they start (stored flagged inconsistent by the ingest worker when a start and a finish acknowledged separately contradict each other).
SELECT e.id::text AS id,
       'start_time ' || e.start_time || ', end_time ' || e.end_time || COALESCE(' — ' || e.inconsistent, ' (not flagged)') AS detail
FROM executed_obs_units e
WHERE e.end_time < e.start_time
ORDER BY e.id
