-- Baseline of the obsops schema: the extension and helper every later migration relies on.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS public;

-- set_updated_at keeps an updated_at column current on UPDATE; tables opt in with a trigger.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION set_updated_at() RETURNS trigger AS $$
BEGIN
    NEW.updated_at = now();
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS set_updated_at();
