-- An executed obs unit never ends before it starts (end_time ≥ start_time; rule 3, constraint executed_obs_units_ends_after_start).
SELECT id::text AS id,
       'start_time ' || start_time || ', end_time ' || end_time || ' (' || (start_time - end_time) || ' before it)' AS detail
FROM executed_obs_units
WHERE end_time < start_time
ORDER BY id
