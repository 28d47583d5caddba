-- Issue 13, agent throughput: the overview counter triggers cost what a statement changed, at any
-- batch size.
--
-- The statement-level triggers of 00008 (operations' rewritten in 00011) joined an UPDATE's old
-- and new rows by key to find the rows whose status (state) changed. PL/pgSQL keeps the plan it
-- made for the first statement of a session: planned for a claim's or complete's few rows, the
-- join was a nested loop, which for the planner's 3,000-row UPDATE (operations marked grouped)
-- compared every old row with every new one (~0.7 s, as much as the rest of making the DTP).
-- A row's status (state) counts -1 under its old key and +1 under its new one; a row that kept
-- its status adds -1 and +1 to the same key. So the deltas are the old rows counted negatively
-- plus the new rows counted positively, grouped by key, without a join, and keys whose sum is 0
-- are not written (the folded counters are the same: a zero delta added nothing).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'op:' || kind || ':' || status, count(*) FROM new_rows GROUP BY kind, status;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'op:' || kind || ':' || status AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'op:' || kind || ':' || status, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_packages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'pkg:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'pkg:' || state AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'pkg:' || state, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_dtps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'dtp:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM (
            SELECT 'dtp:' || state AS key, -1 AS d FROM old_rows
            UNION ALL
            SELECT 'dtp:' || state, 1 FROM new_rows) c
         GROUP BY c.key HAVING sum(c.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION transfer_count_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'op:' || kind || ':' || status, count(*) FROM new_rows GROUP BY kind, status;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT c.key, sum(c.d) FROM old_rows o JOIN new_rows n ON n.id = o.id
         CROSS JOIN LATERAL (VALUES ('op:' || o.kind || ':' || o.status, -1), ('op:' || n.kind || ':' || n.status, 1)) c (key, d)
         WHERE n.status <> o.status GROUP BY c.key;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_packages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'pkg:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT key, sum(d) FROM (
            SELECT 'pkg:' || o.state AS key, -1 AS d
              FROM old_rows o JOIN new_rows n USING (raw_data_package_id) WHERE n.state <> o.state
            UNION ALL
            SELECT 'pkg:' || n.state, 1
              FROM old_rows o JOIN new_rows n USING (raw_data_package_id) WHERE n.state <> o.state
        ) c GROUP BY key;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transfer_count_dtps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT 'dtp:' || state, count(*) FROM new_rows GROUP BY state;
    ELSE
        INSERT INTO transfer_counter_deltas (key, delta)
        SELECT key, sum(d) FROM (
            SELECT 'dtp:' || o.state AS key, -1 AS d
              FROM old_rows o JOIN new_rows n USING (id) WHERE n.state <> o.state
            UNION ALL
            SELECT 'dtp:' || n.state, 1
              FROM old_rows o JOIN new_rows n USING (id) WHERE n.state <> o.state
        ) c GROUP BY key;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
