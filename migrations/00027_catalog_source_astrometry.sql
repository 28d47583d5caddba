-- Sources carry the rest of their astrometry: parallax and radial velocity, so that a target list
-- imported from a spreadsheet or a VOTable (POST /sources/import) keeps every column an astronomer
-- gives, and an export (GET /sources/ as CSV or VOTable) gives them back. Both are optional, used
-- only for fixed sources (the same rule as proper motion), and bounded to physical values:
-- parallax in milliarcseconds (the nearest star is 768 mas), radial velocity in km/s (|v| below
-- a tenth of the speed of light covers every Galactic source and most galaxies).

-- +goose Up
ALTER TABLE sources
    ADD COLUMN parallax_mas         DOUBLE PRECISION CHECK (parallax_mas >= 0 AND parallax_mas <= 1000),
    ADD COLUMN radial_velocity_kms  DOUBLE PRECISION CHECK (radial_velocity_kms BETWEEN -30000 AND 30000),
    ADD CONSTRAINT sources_astrometry_fixed_only CHECK (kind = 'fixed' OR (parallax_mas IS NULL AND radial_velocity_kms IS NULL));

-- +goose Down
ALTER TABLE sources
    DROP CONSTRAINT sources_astrometry_fixed_only,
    DROP COLUMN radial_velocity_kms,
    DROP COLUMN parallax_mas;
