-- transfer_append_only refuses every UPDATE and DELETE of a row of the transfer service's audit
-- tables: operation_history (each status change of an operation) and operation_failures (each
-- failed attempt), through their BEFORE UPDATE OR DELETE triggers (00008). No Go code calls it;
-- transfer only ever inserts into those tables.
--
-- History: 00008.

CREATE OR REPLACE FUNCTION transfer_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END $$;
