-- Logins link identities, never usernames: an identity-provider login finds its account by
-- (oidc_issuer, oidc_subject) alone (UNIQUE since 00002), and linking an existing account to an
-- identity is an explicit, audited admin action (PUT /api/users/{id}/identity, `authtoken admin
-- link-identity`): the audit log gains that action.

-- +goose Up
ALTER TABLE user_audit DROP CONSTRAINT user_audit_action_check,
    ADD CONSTRAINT user_audit_action_check CHECK (action IN ('disable', 'enable', 'set_roles', 'grant_roles', 'link_identity'));

-- +goose Down
DELETE FROM user_audit WHERE action = 'link_identity';
ALTER TABLE user_audit DROP CONSTRAINT user_audit_action_check,
    ADD CONSTRAINT user_audit_action_check CHECK (action IN ('disable', 'enable', 'set_roles', 'grant_roles'));
