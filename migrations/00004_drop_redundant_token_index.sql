-- api_tokens_user_id (user_id) is covered by api_tokens_user_id_created (user_id, created_at,
-- id) from 00003, which also serves the foreign key's lookups; keeping both only made every
-- token insert maintain one more index.

-- +goose Up
DROP INDEX api_tokens_user_id;

-- +goose Down
CREATE INDEX api_tokens_user_id ON api_tokens (user_id);
