-- Catalog: instruments and their modules (reference data with fixed ids), sources with their
-- aliases, observing programs and their obs units. Written only by the catalog service.
--
-- Cone search uses the q3c extension (Debian postgresql-15-q3c; container and Kubernetes
-- PostgreSQL images must carry it). CREATE EXTENSION q3c needs a superuser: where the migrating
-- role is not one, a DBA runs `CREATE EXTENSION q3c` once beforehand and this is a no-op.
-- pg_trgm (contrib, a trusted extension) serves substring name search.

-- +goose Up
CREATE EXTENSION IF NOT EXISTS q3c;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE instruments (
    id          INTEGER     PRIMARY KEY,
    name        TEXT        NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    description TEXT        NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE instrument_modules (
    id            INTEGER     PRIMARY KEY,
    instrument_id INTEGER     NOT NULL REFERENCES instruments (id),
    name          TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    config        JSONB       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(config) = 'object'),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (instrument_id, name)
);

-- Reference data. Ids are fixed (other tables and services refer to them) and leave room for more
-- modules per instrument: Prime-Cam 11-19, Mod-Cam 21-29, CHAI 31-39. Numbers are nominal design
-- values of the FYST instruments (CCAT Collaboration 2023, ApJS 264, 7; Vavagiakis et al. 2018;
-- Graf et al. 2019).
INSERT INTO instruments (id, name, description) VALUES
    (1, 'Prime-Cam', 'FYST first-generation wide-field receiver: seven instrument modules (broadband polarimetric cameras with kinetic inductance detectors and the EoR-Spec Fabry-Perot imaging spectrometer) in a 1.8 m cryostat.'),
    (2, 'Mod-Cam',   'FYST first-light and module test-bed receiver: one Prime-Cam instrument module in a single-module cryostat.'),
    (3, 'CHAI',      'CCAT Heterodyne Array Instrument: dual-band heterodyne array receiver for the [CI] and CO lines.');

INSERT INTO instrument_modules (id, instrument_id, name, config) VALUES
    (11, 1, '280 GHz', '{"type": "camera", "detector": "MKID", "center_frequency_ghz": 280, "frequency_range_ghz": [250, 310], "n_arrays": 3, "n_detectors": 10368, "polarimetric": true, "beam_fwhm_arcsec": 45, "fov_deg": 1.3}'),
    (12, 1, '350 GHz', '{"type": "camera", "detector": "MKID", "center_frequency_ghz": 350, "frequency_range_ghz": [315, 385], "n_arrays": 3, "n_detectors": 10368, "polarimetric": true, "beam_fwhm_arcsec": 35, "fov_deg": 1.3}'),
    (13, 1, '850 GHz', '{"type": "camera", "detector": "MKID", "center_frequency_ghz": 850, "frequency_range_ghz": [810, 890], "n_arrays": 3, "n_detectors": 19200, "polarimetric": true, "beam_fwhm_arcsec": 15, "fov_deg": 1.3}'),
    (14, 1, 'EoR-Spec', '{"type": "imaging_spectrometer", "detector": "MKID", "technology": "scanning Fabry-Perot interferometer", "frequency_range_ghz": [210, 420], "resolving_power": 100, "n_arrays": 4, "n_detectors": 6912, "polarimetric": false, "beam_fwhm_arcsec": 45, "fov_deg": 1.1, "target_lines": ["[CII] 158um"]}'),
    (21, 2, '280 GHz', '{"type": "camera", "detector": "MKID", "center_frequency_ghz": 280, "frequency_range_ghz": [250, 310], "n_arrays": 3, "n_detectors": 10368, "polarimetric": true, "beam_fwhm_arcsec": 45, "fov_deg": 1.3, "note": "Prime-Cam 280 GHz module commissioned in Mod-Cam"}'),
    (31, 3, 'LFA', '{"type": "heterodyne_array", "band": "low-frequency array", "frequency_range_ghz": [455, 495], "n_pixels": 64, "polarizations": 1, "beam_fwhm_arcsec": 26, "target_lines": ["CO 4-3", "[CI] 3P1-3P0"], "backend": "FFTS", "channel_width_khz": 244}'),
    (32, 3, 'HFA', '{"type": "heterodyne_array", "band": "high-frequency array", "frequency_range_ghz": [800, 820], "n_pixels": 64, "polarizations": 1, "beam_fwhm_arcsec": 15, "target_lines": ["[CI] 3P2-3P1", "CO 7-6"], "backend": "FFTS", "channel_width_khz": 244}');

CREATE TABLE sources (
    id             BIGSERIAL        PRIMARY KEY,
    name           TEXT             NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 255),
    kind           TEXT             NOT NULL CHECK (kind IN ('fixed', 'solar_system', 'constant_elevation')),
    ra_deg         DOUBLE PRECISION CHECK (ra_deg >= 0 AND ra_deg < 360),
    dec_deg        DOUBLE PRECISION CHECK (dec_deg BETWEEN -90 AND 90),
    pm_ra_mas_yr   DOUBLE PRECISION,  -- mu_alpha* (includes cos dec), ICRS
    pm_dec_mas_yr  DOUBLE PRECISION,
    epoch          DOUBLE PRECISION,  -- Julian epoch of ra/dec (e.g. 2000.0)
    body           TEXT             CHECK (body IN ('sun', 'moon', 'mercury', 'venus', 'mars', 'jupiter', 'saturn', 'uranus', 'neptune')),
    elevation_deg  DOUBLE PRECISION CHECK (elevation_deg BETWEEN 0 AND 90),
    az_min_deg     DOUBLE PRECISION CHECK (az_min_deg >= 0 AND az_min_deg <= 360),
    az_max_deg     DOUBLE PRECISION CHECK (az_max_deg >= 0 AND az_max_deg <= 360),
    object_type    TEXT             CHECK (length(object_type) <= 100),
    coord_origin   TEXT             NOT NULL DEFAULT 'user' CHECK (coord_origin IN ('user', 'local_catalog', 'database', 'sesame', 'demo')),
    coord_reference TEXT            CHECK (length(coord_reference) <= 500), -- e.g. catalogue entry or Sesame's database
    created_by     TEXT,
    created_at     TIMESTAMPTZ      NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ      NOT NULL DEFAULT now(),
    CONSTRAINT sources_kind_fields CHECK (CASE kind
        WHEN 'fixed' THEN ra_deg IS NOT NULL AND dec_deg IS NOT NULL AND body IS NULL AND elevation_deg IS NULL AND az_min_deg IS NULL AND az_max_deg IS NULL
        WHEN 'solar_system' THEN body IS NOT NULL AND ra_deg IS NULL AND dec_deg IS NULL AND elevation_deg IS NULL AND az_min_deg IS NULL AND az_max_deg IS NULL
        WHEN 'constant_elevation' THEN elevation_deg IS NOT NULL AND az_min_deg IS NOT NULL AND az_max_deg IS NOT NULL AND ra_deg IS NULL AND dec_deg IS NULL AND body IS NULL
    END)
);
CREATE TRIGGER sources_updated_at BEFORE UPDATE ON sources FOR EACH ROW EXECUTE FUNCTION set_updated_at();
-- Cone search: q3c_radial_query(ra_deg, dec_deg, ra0, dec0, radius) uses this index.
CREATE INDEX sources_q3c ON sources (q3c_ang2ipix(ra_deg, dec_deg));
CREATE INDEX sources_kind ON sources (kind);

-- Every name a source answers to, its own name included (is_name), under one unique normalised
-- key (lower case, white space removed): so a name can equal neither another source's name nor
-- any alias, enforced by one index whichever writer races. The service keeps the is_name row in
-- step with sources.name in the same transaction.
CREATE TABLE source_aliases (
    id         BIGSERIAL   PRIMARY KEY,
    source_id  BIGINT      NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    alias      TEXT        NOT NULL CHECK (length(alias) BETWEEN 1 AND 255),
    alias_key  TEXT        NOT NULL GENERATED ALWAYS AS (lower(regexp_replace(alias, '\s', '', 'g'))) STORED UNIQUE,
    is_name    BOOLEAN     NOT NULL DEFAULT false,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX source_aliases_source_id ON source_aliases (source_id);
CREATE UNIQUE INDEX source_aliases_one_name ON source_aliases (source_id) WHERE is_name;
CREATE INDEX source_aliases_key_trgm ON source_aliases USING gin (alias_key gin_trgm_ops);

CREATE TABLE observing_programs (
    id              BIGSERIAL        PRIMARY KEY,
    short_name      TEXT             NOT NULL UNIQUE CHECK (length(short_name) BETWEEN 1 AND 64),
    title           TEXT             NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    pi              TEXT             NOT NULL CHECK (length(pi) BETWEEN 1 AND 255),
    description     TEXT             NOT NULL DEFAULT '' CHECK (length(description) <= 20000),
    status          TEXT             NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'active', 'completed', 'archived')),
    allocated_hours DOUBLE PRECISION CHECK (allocated_hours >= 0),
    created_by      TEXT,
    created_at      TIMESTAMPTZ      NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ      NOT NULL DEFAULT now()
);
CREATE TRIGGER observing_programs_updated_at BEFORE UPDATE ON observing_programs FOR EACH ROW EXECUTE FUNCTION set_updated_at();
CREATE INDEX observing_programs_status ON observing_programs (status, short_name);
CREATE INDEX observing_programs_pi ON observing_programs (pi);

-- Obs units belong to their program (deleted with it); sources and modules they use cannot be
-- deleted while used. Ingest's executed_obs_units reference obs_units(id) without an ON DELETE
-- action, so deleting a program or unit with executed observations fails with SQLSTATE 23503.
CREATE TABLE obs_units (
    id                   BIGSERIAL        PRIMARY KEY,
    program_id           BIGINT           NOT NULL REFERENCES observing_programs (id) ON DELETE CASCADE,
    name                 TEXT             NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
    source_id            BIGINT           NOT NULL REFERENCES sources (id),
    instrument_module_id INTEGER          NOT NULL REFERENCES instrument_modules (id),
    duration_s           DOUBLE PRECISION NOT NULL CHECK (duration_s > 0),
    min_elevation_deg    DOUBLE PRECISION CHECK (min_elevation_deg BETWEEN 0 AND 90),
    priority             INTEGER,
    created_at           TIMESTAMPTZ      NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ      NOT NULL DEFAULT now(),
    UNIQUE (program_id, name)
);
CREATE TRIGGER obs_units_updated_at BEFORE UPDATE ON obs_units FOR EACH ROW EXECUTE FUNCTION set_updated_at();
CREATE INDEX obs_units_source_id ON obs_units (source_id);
CREATE INDEX obs_units_instrument_module_id ON obs_units (instrument_module_id);

-- +goose Down
DROP TABLE obs_units;
DROP TABLE observing_programs;
DROP TABLE source_aliases;
DROP TABLE sources;
DROP TABLE instrument_modules;
DROP TABLE instruments;
-- The extensions stay: a DBA may have installed them for this database, and other objects may use them.
