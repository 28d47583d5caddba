-- Issue 26, point 1: an obs unit's observing constraints besides min_elevation_deg (the rule is
-- catalog.ObsUnitConstraints.Validate; these checks repeat it so that no writer can store a unit
-- the visibility engine would misread). Every column is optional: null is no constraint.
--   max_airmass              sec z at most this, 1–40
--   min_moon_separation_deg  angle to the Moon at least this, 0–180
--   min_sun_separation_deg   replaces the site's Sun avoidance for the unit, 0–180
--   max_pwv_mm               PWV at most this, (0, 50] mm (site_weather's bound)
--   lst_start/end_hours      an LST range in hours [0, 24), both or neither, different (end < start
--                            wraps midnight)
--   time_windows             UTC intervals [start, end): a multirange keeps them sorted and apart;
--                            bounded on both sides and not empty (the API refuses touching or
--                            overlapping windows, which the multirange would merge)

-- +goose Up
ALTER TABLE obs_units
    ADD COLUMN max_airmass             DOUBLE PRECISION CHECK (max_airmass >= 1 AND max_airmass <= 40),
    ADD COLUMN min_moon_separation_deg DOUBLE PRECISION CHECK (min_moon_separation_deg BETWEEN 0 AND 180),
    ADD COLUMN min_sun_separation_deg  DOUBLE PRECISION CHECK (min_sun_separation_deg BETWEEN 0 AND 180),
    ADD COLUMN max_pwv_mm              DOUBLE PRECISION CHECK (max_pwv_mm > 0 AND max_pwv_mm <= 50),
    ADD COLUMN lst_start_hours         DOUBLE PRECISION CHECK (lst_start_hours >= 0 AND lst_start_hours < 24),
    ADD COLUMN lst_end_hours           DOUBLE PRECISION CHECK (lst_end_hours >= 0 AND lst_end_hours < 24),
    ADD COLUMN time_windows            TSTZMULTIRANGE,
    ADD CONSTRAINT obs_units_lst_range CHECK ((lst_start_hours IS NULL) = (lst_end_hours IS NULL) AND lst_start_hours <> lst_end_hours),
    ADD CONSTRAINT obs_units_time_windows CHECK (NOT isempty(time_windows) AND NOT lower_inf(time_windows) AND NOT upper_inf(time_windows)
        AND time_windows <@ tstzrange('1900-01-01T00:00:00Z', '2101-01-01T00:00:00Z'));

-- +goose Down
ALTER TABLE obs_units
    DROP CONSTRAINT obs_units_time_windows,
    DROP CONSTRAINT obs_units_lst_range,
    DROP COLUMN time_windows,
    DROP COLUMN lst_end_hours,
    DROP COLUMN lst_start_hours,
    DROP COLUMN max_pwv_mm,
    DROP COLUMN min_sun_separation_deg,
    DROP COLUMN min_moon_separation_deg,
    DROP COLUMN max_airmass;
