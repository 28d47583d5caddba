-- Identity: users (people from the identity provider and service accounts), their roles, API
-- tokens (only each secret's SHA-256 is stored, token_hash; prefix identifies a token to its owner)
-- and the audit trail of token changes. Written only by the authtoken service.

-- +goose Up
CREATE TABLE users (
    id             BIGSERIAL PRIMARY KEY,
    username       TEXT        NOT NULL UNIQUE CHECK (length(username) BETWEEN 1 AND 255),
    email          TEXT,
    display_name   TEXT,
    oidc_issuer    TEXT,
    oidc_subject   TEXT,
    is_service     BOOLEAN     NOT NULL DEFAULT false,
    is_active      BOOLEAN     NOT NULL DEFAULT true,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_login_at  TIMESTAMPTZ,
    UNIQUE (oidc_issuer, oidc_subject)
);
CREATE TRIGGER users_updated_at BEFORE UPDATE ON users FOR EACH ROW EXECUTE FUNCTION set_updated_at();

CREATE TABLE user_roles (
    user_id    BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT        NOT NULL CHECK (role IN ('admin', 'observer', 'viewer', 'service')),
    granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    granted_by TEXT        NOT NULL DEFAULT 'system',
    PRIMARY KEY (user_id, role)
);

CREATE TABLE api_tokens (
    id           BIGSERIAL PRIMARY KEY,
    user_id      BIGINT       NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         VARCHAR(255) NOT NULL,
    token_hash   VARCHAR(64)  NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    prefix       VARCHAR(16)  NOT NULL,
    scopes       TEXT[]       NOT NULL DEFAULT '{}',
    last_used_at TIMESTAMPTZ,
    last_used_ip TEXT,
    usage_count  BIGINT       NOT NULL DEFAULT 0 CHECK (usage_count >= 0),
    is_active    BOOLEAN      NOT NULL DEFAULT true,
    expires_at   TIMESTAMPTZ,
    created_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    revoked_at   TIMESTAMPTZ,
    replaced_by  BIGINT       REFERENCES api_tokens (id)
);
CREATE INDEX api_tokens_user_id ON api_tokens (user_id);

CREATE TABLE token_audit (
    id            BIGSERIAL PRIMARY KEY,
    at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor_user_id BIGINT      REFERENCES users (id) ON DELETE SET NULL,
    actor         TEXT        NOT NULL,
    token_id      BIGINT      REFERENCES api_tokens (id) ON DELETE SET NULL,
    action        TEXT        NOT NULL CHECK (action IN ('create', 'update', 'regenerate', 'revoke', 'create_service')),
    detail        JSONB       NOT NULL DEFAULT '{}'
);
CREATE INDEX token_audit_token_id ON token_audit (token_id);
CREATE INDEX token_audit_at ON token_audit (at);

-- +goose Down
DROP TABLE token_audit;
DROP TABLE api_tokens;
DROP TABLE user_roles;
DROP TABLE users;
