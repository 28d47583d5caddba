-- An execution never ends before it starts: the rule ingest checks when it acknowledges a finish
-- (ingest.endsAfterStart, services/ingest/references.go), held again by the database so that no
-- contradiction can be stored whatever writes it. start_time is NULL only while a finish has
-- been applied before its start; end_time while the execution runs.
--
-- A database that already holds such executions is not changed: the migration stops and names
-- them (at most 20; the query below lists them all), so that an operator decides what each one
-- really was instead of the constraint failing obscurely:
--   SELECT id, start_time, end_time FROM executed_obs_units WHERE end_time < start_time;

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    bad text;
    n   bigint;
BEGIN
    SELECT count(*), string_agg(id::text || ' (' || start_time || ' → ' || end_time || ')', ', ')
        FILTER (WHERE rn <= 20)
    INTO n, bad
    FROM (SELECT id, start_time, end_time, row_number() OVER (ORDER BY id) AS rn
          FROM executed_obs_units WHERE end_time < start_time) v;
    IF n > 0 THEN
        RAISE EXCEPTION '% executed obs unit(s) end before they start, e.g. %: correct them first (SELECT id, start_time, end_time FROM executed_obs_units WHERE end_time < start_time)', n, bad;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE executed_obs_units ADD CONSTRAINT executed_obs_units_ends_after_start
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time);

-- +goose Down
ALTER TABLE executed_obs_units DROP CONSTRAINT executed_obs_units_ends_after_start;
