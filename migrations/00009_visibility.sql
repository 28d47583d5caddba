-- Visibility heatmaps (issue 14): hours observable per UTC day of a year for each source, computed
-- by the catalog service (synchronously for a few sources, else by the admin-triggered
-- precalculation job on the asynq queue "visibility") and served from here. Written only by
-- the catalog service.

-- +goose Up
-- One row per source, year and constraint set. constraints_key is a SHA-256 over the site
-- settings (position, elevation limits, Sun avoidance, refraction) and the source's coordinates:
-- when either changes, the old row no longer matches and is a miss (and is replaced when the
-- heatmap is computed again).
CREATE TABLE visibility_heatmaps (
    source_id       BIGINT      NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    year            INTEGER     NOT NULL CHECK (year BETWEEN 1900 AND 2100),
    constraints_key TEXT        NOT NULL CHECK (length(constraints_key) = 64),
    hours           BYTEA       NOT NULL, -- float32 little-endian, one per UTC day (365 or 366)
    computed_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, year, constraints_key)
);

-- Precalculation jobs: progress for GET /visibility/precalculate/{job_id}. idem_key (year, the
-- source set and the site settings) makes a repeated request answer the job already queued or
-- running instead of starting another.
CREATE TABLE visibility_jobs (
    id            BIGSERIAL   PRIMARY KEY,
    idem_key      TEXT        NOT NULL CHECK (length(idem_key) = 64),
    year          INTEGER     NOT NULL CHECK (year BETWEEN 1900 AND 2100),
    source_ids    BIGINT[]    NOT NULL,
    status        TEXT        NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'completed', 'failed')),
    sources_done  INTEGER     NOT NULL DEFAULT 0 CHECK (sources_done >= 0),
    sources_total INTEGER     NOT NULL CHECK (sources_total >= 0),
    error         TEXT,
    requested_by  TEXT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX visibility_jobs_active ON visibility_jobs (idem_key) WHERE status IN ('queued', 'running');

-- +goose Down
DROP TABLE visibility_jobs;
DROP TABLE visibility_heatmaps;
