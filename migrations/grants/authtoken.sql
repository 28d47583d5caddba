-- authtoken: users, roles, API tokens and their audit (migrations 00002, 00003, 00005).
-- One line per table: a new table of the service gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_authtoken; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON users TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_roles TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON api_tokens TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON token_audit TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON token_usage_flushes TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_audit TO obsops_authtoken;
GRANT USAGE, SELECT ON SEQUENCE users_id_seq, api_tokens_id_seq, token_audit_id_seq, user_audit_id_seq TO obsops_authtoken;
