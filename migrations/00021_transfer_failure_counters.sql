-- Issue 23, rule 9: failures are seen without polling. A maintained counter of failed attempts
-- by error type (failures:<error_type> in transfer_counters, kept by a trigger on the
-- append-only operation_failures like the other overview counters), so the transfer service's
-- /metrics exports obsops_transfer_operation_failures_total{error_type} without a scan per
-- scrape. Starts from the failures already recorded.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION transfer_count_failures() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transfer_counter_deltas (key, delta)
    SELECT 'failures:' || error_type, count(*) FROM new_rows GROUP BY error_type;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operation_failures_count_insert AFTER INSERT ON operation_failures
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION transfer_count_failures();
INSERT INTO transfer_counters (key, value)
SELECT 'failures:' || error_type, count(*) FROM operation_failures GROUP BY error_type
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- +goose Down
DROP TRIGGER operation_failures_count_insert ON operation_failures;
DROP FUNCTION transfer_count_failures();
DELETE FROM transfer_counter_deltas WHERE key LIKE 'failures:%';
DELETE FROM transfer_counters WHERE key LIKE 'failures:%';
