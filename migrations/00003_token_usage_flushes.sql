-- API token usage is counted in Redis on the verification path and applied to api_tokens in
-- batches ("flushes"). Every applied flush is recorded here in the same transaction as its
-- UPDATE, so a flush left behind by a crash is applied exactly once: replaying one whose id is
-- already here changes nothing. Written only by the authtoken service, which prunes old rows.

-- +goose Up
CREATE TABLE token_usage_flushes (
    flush_id   TEXT        PRIMARY KEY CHECK (length(flush_id) BETWEEN 1 AND 64),
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    tokens     INTEGER     NOT NULL CHECK (tokens >= 0),
    uses       BIGINT      NOT NULL CHECK (uses >= 0)
);
CREATE INDEX token_usage_flushes_applied_at ON token_usage_flushes (applied_at);

-- Listing a user's tokens newest first, and counting their active ones against the per-user limit.
CREATE INDEX api_tokens_user_id_created ON api_tokens (user_id, created_at DESC, id DESC);

-- +goose Down
DROP INDEX api_tokens_user_id_created;
DROP TABLE token_usage_flushes;
