-- authtoken: users, roles, API tokens and their audit (migrations 00002, 00003, 00005).
-- One line per table: a new table of the service gets its line here (TestEveryTableHasGrants).
GRANT SELECT ON goose_db_version TO obsops_authtoken; -- readiness: the schema's version
GRANT SELECT, INSERT, UPDATE, DELETE ON users TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_roles TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON api_tokens TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON token_audit TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON token_usage_flushes TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_audit TO obsops_authtoken;
GRANT SELECT, INSERT, UPDATE, DELETE ON service_bindings TO obsops_authtoken; -- 00023: service accounts' bindings
-- Reads of other services' tables:
GRANT SELECT ON instruments, instrument_modules TO obsops_authtoken; -- catalog's: an instrument account's bindings, expanded to modules
GRANT SELECT ON data_locations TO obsops_authtoken; -- transfer's: a mover's locations must exist
GRANT USAGE, SELECT ON SEQUENCE users_id_seq, api_tokens_id_seq, token_audit_id_seq, user_audit_id_seq TO obsops_authtoken;
