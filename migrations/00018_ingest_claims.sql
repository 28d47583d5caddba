-- Ingest integrity (issue 23, rules 1–4): what ingest checks when it acknowledges a write, held
-- again by the database.
--
--  1. A file belongs to at most one package. Membership was kept twice (raw_data_packages.file_ids
--     and raw_data_files.raw_data_package_id), so two packages could each name one file. It is now
--     kept once, in raw_data_package_files keyed by the file: a second package for a file is a
--     primary-key violation, whatever the arrival order of the buffered writes (no foreign keys:
--     a file may be applied before its package and the other way round, see 00007). A package's
--     name is unique within its execution.
--  2. A file path (the file's full path on the instrument module's storage) is unique per
--     instrument module.
--  3. An execution never ends before it starts — unless flagged: the worker applies a finish and a
--     start in whatever order they arrive, and when they contradict each other it keeps both and
--     sets executed_obs_units.inconsistent (a reason) instead of dead-lettering an acknowledged
--     write; migrations/invariants/executions_end_before_start.sql lists them.
--  4. ingest_collisions records a buffered write the worker could not apply as it was
--     acknowledged because a concurrent one won the same path, file or package name (possible
--     only between two sites, whose buffers are separate; see docs/decisions.md): the losing
--     record is kept there in full for an operator, instead of a dead letter.
--
-- A database that already holds files in two packages, two packages of one name in one execution
-- or two files of one path on one module is not changed: the migration stops and names them (the
-- queries in the message list them all), so that an operator decides which is right.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    n   bigint;
    bad text;
BEGIN
    SELECT count(*), string_agg(file_id || ' (packages ' || pkgs || ')', ', ') FILTER (WHERE rn <= 20)
    INTO n, bad
    FROM (SELECT file_id, string_agg(DISTINCT package_id::text, ' ') AS pkgs, row_number() OVER (ORDER BY file_id) AS rn
          FROM (SELECT id AS file_id, raw_data_package_id AS package_id FROM raw_data_files WHERE raw_data_package_id IS NOT NULL
                UNION SELECT unnest(file_ids), id FROM raw_data_packages) m
          GROUP BY file_id HAVING count(DISTINCT package_id) > 1) v;
    IF n > 0 THEN
        RAISE EXCEPTION '% raw data file(s) belong to two packages, e.g. %: keep each in one package first (SELECT file_id, array_agg(package_id) FROM (SELECT id AS file_id, raw_data_package_id AS package_id FROM raw_data_files WHERE raw_data_package_id IS NOT NULL UNION SELECT unnest(file_ids), id FROM raw_data_packages) m GROUP BY 1 HAVING count(DISTINCT package_id) > 1)', n, bad;
    END IF;
    SELECT count(*), string_agg(executed_obs_unit_id || ' ' || quote_literal(name) || ' (packages ' || ids || ')', ', ') FILTER (WHERE rn <= 20)
    INTO n, bad
    FROM (SELECT executed_obs_unit_id, name, string_agg(id::text, ' ') AS ids, row_number() OVER (ORDER BY executed_obs_unit_id, name) AS rn
          FROM raw_data_packages GROUP BY executed_obs_unit_id, name HAVING count(*) > 1) v;
    IF n > 0 THEN
        RAISE EXCEPTION '% package name(s) are used twice in one execution, e.g. %: rename them first (SELECT executed_obs_unit_id, name, array_agg(id) FROM raw_data_packages GROUP BY 1, 2 HAVING count(*) > 1)', n, bad;
    END IF;
    SELECT count(*), string_agg(instrument_module_id || ':' || path || ' (files ' || ids || ')', ', ') FILTER (WHERE rn <= 20)
    INTO n, bad
    FROM (SELECT instrument_module_id, path, string_agg(id::text, ' ') AS ids, row_number() OVER (ORDER BY instrument_module_id, path) AS rn
          FROM raw_data_files GROUP BY instrument_module_id, path HAVING count(*) > 1) v;
    IF n > 0 THEN
        RAISE EXCEPTION '% path(s) are registered twice on one instrument module, e.g. %: correct them first (SELECT instrument_module_id, path, array_agg(id) FROM raw_data_files GROUP BY 1, 2 HAVING count(*) > 1)', n, bad;
    END IF;
END
$$;
-- +goose StatementEnd

CREATE TABLE raw_data_package_files (
    file_id    UUID        PRIMARY KEY,
    package_id UUID        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX raw_data_package_files_package ON raw_data_package_files (package_id, file_id);
INSERT INTO raw_data_package_files (file_id, package_id)
SELECT id, raw_data_package_id FROM raw_data_files WHERE raw_data_package_id IS NOT NULL
UNION SELECT unnest(file_ids), id FROM raw_data_packages;
ALTER TABLE raw_data_packages DROP COLUMN file_ids;
ALTER TABLE raw_data_files DROP COLUMN raw_data_package_id;

CREATE UNIQUE INDEX raw_data_files_module_path ON raw_data_files (instrument_module_id, path);
CREATE UNIQUE INDEX raw_data_packages_execution_name ON raw_data_packages (executed_obs_unit_id, name);

ALTER TABLE executed_obs_units ADD COLUMN inconsistent TEXT CHECK (length(inconsistent) BETWEEN 1 AND 1000);
ALTER TABLE executed_obs_units DROP CONSTRAINT executed_obs_units_ends_after_start;
ALTER TABLE executed_obs_units ADD CONSTRAINT executed_obs_units_ends_after_start
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time OR inconsistent IS NOT NULL);
CREATE INDEX executed_obs_units_inconsistent ON executed_obs_units (id) WHERE inconsistent IS NOT NULL;

CREATE TABLE ingest_collisions (
    id         BIGSERIAL   PRIMARY KEY,
    kind       TEXT        NOT NULL CHECK (kind IN ('file_path', 'file_package', 'package_name', 'package_file')),
    -- The record that lost (a file or a package), and the one that holds the path, file or name.
    record_id  UUID        NOT NULL,
    other_id   UUID,
    tx         UUID,
    detail     TEXT        NOT NULL,
    -- The losing record in full (a file's or package's task JSON), for the operator.
    record     JSONB,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE ingest_collisions;
DROP INDEX executed_obs_units_inconsistent;
ALTER TABLE executed_obs_units DROP CONSTRAINT executed_obs_units_ends_after_start;
ALTER TABLE executed_obs_units ADD CONSTRAINT executed_obs_units_ends_after_start
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time);
ALTER TABLE executed_obs_units DROP COLUMN inconsistent;
DROP INDEX raw_data_packages_execution_name;
DROP INDEX raw_data_files_module_path;
ALTER TABLE raw_data_files ADD COLUMN raw_data_package_id UUID;
ALTER TABLE raw_data_packages ADD COLUMN file_ids UUID[] NOT NULL DEFAULT '{}';
UPDATE raw_data_files f SET raw_data_package_id = m.package_id FROM raw_data_package_files m WHERE m.file_id = f.id;
UPDATE raw_data_packages p SET file_ids = ARRAY(SELECT m.file_id FROM raw_data_package_files m WHERE m.package_id = p.id ORDER BY 1);
CREATE INDEX raw_data_files_package ON raw_data_files (raw_data_package_id) WHERE raw_data_package_id IS NOT NULL;
CREATE INDEX raw_data_packages_file_ids ON raw_data_packages USING gin (file_ids);
DROP TABLE raw_data_package_files;
