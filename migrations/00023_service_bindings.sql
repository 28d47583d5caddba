-- Issue 24, points 3 and 4: a service account has a kind (instrument, mover, weather) and
-- bindings. An instrument account is bound to instrument modules and/or whole instruments (the
-- records it may write in ingest), a mover to data locations (the operations it may claim in
-- transfer); a weather account has none. Written only by the authtoken service (given when the
-- account is created; changed by an admin, audited in token_audit as set_bindings).
--
-- Existing service accounts keep service_kind NULL ("no kind"): they still verify and read what
-- their scopes allow, but no route that checks ownership (ingest's writes, the movers' agent API)
-- accepts them until an admin gives them a kind and bindings (docs/decisions.md §34).
--
-- The binding's kind is part of its foreign key to its account (user_id, kind) → users (id,
-- service_kind), so a binding always matches its account's kind, and an account's kind cannot
-- change while it has bindings.

-- +goose Up
ALTER TABLE users ADD COLUMN service_kind TEXT
    CONSTRAINT users_service_kind CHECK (service_kind IN ('instrument', 'mover', 'weather'));
ALTER TABLE users ADD CONSTRAINT users_service_kind_service CHECK (service_kind IS NULL OR is_service);
ALTER TABLE users ADD CONSTRAINT users_id_service_kind UNIQUE (id, service_kind);

CREATE TABLE service_bindings (
    user_id              BIGINT      NOT NULL,
    kind                 TEXT        NOT NULL,
    instrument_id        INTEGER     REFERENCES instruments (id),
    instrument_module_id INTEGER     REFERENCES instrument_modules (id),
    location_id          INTEGER     REFERENCES data_locations (id),
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (user_id, kind) REFERENCES users (id, service_kind) ON DELETE CASCADE,
    -- One thing per row, of the account's kind: instruments bind modules or instruments,
    -- movers bind locations, weather binds nothing.
    CHECK (num_nonnulls(instrument_id, instrument_module_id, location_id) = 1),
    CHECK (CASE kind
        WHEN 'instrument' THEN location_id IS NULL
        WHEN 'mover' THEN location_id IS NOT NULL
        ELSE false END)
);
CREATE UNIQUE INDEX service_bindings_instrument ON service_bindings (user_id, instrument_id) WHERE instrument_id IS NOT NULL;
CREATE UNIQUE INDEX service_bindings_module ON service_bindings (user_id, instrument_module_id) WHERE instrument_module_id IS NOT NULL;
CREATE UNIQUE INDEX service_bindings_location ON service_bindings (user_id, location_id) WHERE location_id IS NOT NULL;

ALTER TABLE token_audit DROP CONSTRAINT token_audit_action_check;
ALTER TABLE token_audit ADD CONSTRAINT token_audit_action_check
    CHECK (action IN ('create', 'update', 'regenerate', 'revoke', 'create_service', 'set_bindings'));

-- +goose Down
ALTER TABLE token_audit DROP CONSTRAINT token_audit_action_check;
DELETE FROM token_audit WHERE action = 'set_bindings';
ALTER TABLE token_audit ADD CONSTRAINT token_audit_action_check
    CHECK (action IN ('create', 'update', 'regenerate', 'revoke', 'create_service'));
DROP TABLE service_bindings;
ALTER TABLE users DROP CONSTRAINT users_id_service_kind;
ALTER TABLE users DROP COLUMN service_kind;
