-- Issue 26, point 2: the site's weather series — precipitable water vapour (PWV) measured
-- (radiometer) and forecast (a model's run), owned by the site service (pkg/weather; retention
-- by OPS_WEATHER_RETENTION_DAYS, pruned by the site service at the main site).
-- A measurement is one value at one time from one source; a forecast point also names its run
-- (issued_at). Re-posting a point (same kind, source, time and run) replaces its value.

-- +goose Up
CREATE TABLE site_weather (
    id         bigserial PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('measurement', 'forecast')),
    at         timestamptz NOT NULL,
    pwv_mm     double precision NOT NULL CHECK (pwv_mm >= 0 AND pwv_mm <= 50),
    source     text NOT NULL CHECK (length(source) BETWEEN 1 AND 100),
    issued_at  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT site_weather_forecast_has_run CHECK ((kind = 'forecast') = (issued_at IS NOT NULL)),
    CONSTRAINT site_weather_point UNIQUE NULLS NOT DISTINCT (kind, source, at, issued_at)
);
CREATE INDEX site_weather_at ON site_weather (at, id);

-- +goose Down
DROP TABLE site_weather;
