-- User administration (issue 10): disabling a user ends their sessions, and every change to a
-- user's roles or active flag is audited like token changes.
--
-- sessions_valid_after: session JWTs issued before it are refused everywhere (set when the
-- user is disabled, so re-enabling does not bring old sessions back).

-- +goose Up
ALTER TABLE users ADD COLUMN sessions_valid_after TIMESTAMPTZ;

CREATE TABLE user_audit (
    id            BIGSERIAL PRIMARY KEY,
    at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor_user_id BIGINT      REFERENCES users (id) ON DELETE SET NULL,
    actor         TEXT        NOT NULL,
    user_id       BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    action        TEXT        NOT NULL CHECK (action IN ('disable', 'enable', 'set_roles', 'grant_roles')),
    detail        JSONB       NOT NULL DEFAULT '{}'
);
CREATE INDEX user_audit_user_id ON user_audit (user_id, id);

-- +goose Down
DROP TABLE user_audit;
ALTER TABLE users DROP COLUMN sessions_valid_after;
