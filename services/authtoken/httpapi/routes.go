// Package httpapi is the authtoken service's HTTP surface.
package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/login"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// Handlers serves the identity and token routes.
type Handlers struct {
	Auth   *authn.Authenticator
	Users  *authtoken.UserService
	Keys   *signing.KeyRing
	Tokens *authtoken.TokenService
	// Login runs the identity-provider login (/idp/login, /idp/callback).
	Login *login.Service
	// UIRedirectURL, when set, is where /idp/callback sends the browser with the JWT in the
	// URL fragment instead of answering JSON (OPS_UI_REDIRECT_URL).
	UIRedirectURL string
}

// Register adds every route of the authtoken service. Access rules come from the suite's access
// table (pkg/authn/access.go) through Auth.Op.
func Register(api huma.API, h *Handlers) {
	// ---- Identity: login through the identity provider, session JWTs, JWKS, current user ----
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "idp-login", Method: http.MethodGet, Path: "/idp/login",
		Summary: "Start login with the identity provider", Tags: []string{"Authentication"}, DefaultStatus: http.StatusFound,
		Description: "Starts an OpenID Connect authorization code flow with PKCE (S256) at the configured identity provider " +
			"(OPS_OIDC_ISSUER): a random state, nonce and PKCE verifier are kept in Redis for 10 minutes (single use) and " +
			"the browser is redirected to the provider. Open it in a browser; the provider sends the browser back to /idp/callback. " +
			"A native app (the obsops command) adds redirect_uri (http on a loopback IP literal with a port, RFC 8252; anything else " +
			"is a 422 naming query.redirect_uri), code_challenge (S256) and its state: the login then ends with a redirect to " +
			"redirect_uri?code=…&state=… carrying a one-time code (never the JWT), exchanged at POST /idp/token.",
		Responses: map[string]*huma.Response{
			"302": {Description: "Redirect to the identity provider's login page."},
			"503": {Description: "Login is not configured (no OPS_OIDC_ISSUER), or the identity provider or Redis is unavailable."},
		},
	}), h.startLogin)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "idp-callback", Method: http.MethodGet, Path: "/idp/callback",
		Summary: "Finish login (identity-provider callback)", Tags: []string{"Authentication"},
		Description: "Where the identity provider sends the browser back. The state is consumed (a reused, unknown or expired " +
			"state is refused), the code is exchanged with the PKCE verifier, and the ID token is verified (signature, issuer, " +
			"audience = client id, expiry, nonce). The user is created or refreshed from the ID token (username = " +
			"preferred_username, else email, else sub): a new user gets role viewer, and users named in OPS_BOOTSTRAP_ADMINS " +
			"get admin. The answer is the service's own session JWT (EdDSA, kid, iss, aud, sub = username, uid, roles, exp): " +
			"as JSON, or — when OPS_UI_REDIRECT_URL is set — as a redirect to the UI with the JWT in the URL fragment.",
		Responses: callbackResponses(api),
	}), h.finishLogin)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "idp-token", Method: http.MethodPost, Path: "/idp/token",
		Summary: "Exchange a native app's one-time code for a session JWT", Tags: []string{"Authentication"}, Errors: []int{400, 409, 422, 503},
		Description: "The end of a native app's login (the obsops command; RFC 8252 with PKCE, RFC 7636): the app started it at " +
			"/idp/login with redirect_uri on a loopback address and code_challenge, the browser brought the one-time code to that " +
			"address, and the app sends it here with its code_verifier and the same redirect_uri. The code is spent by the first " +
			"exchange, right or wrong, and expires after 60 s. 400 naming body.code (unknown, expired or used), " +
			"body.code_verifier (does not match the challenge) or body.redirect_uri (differs). The answer is the session JWT, as " +
			"/idp/callback gives it to a browser login.",
	}), h.exchangeCode)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-jwks", Method: http.MethodGet, Path: "/.well-known/jwks.json",
		Summary: "Public keys of session JWTs (JWKS)", Tags: []string{"Authentication"},
		Description: "The Ed25519 public keys (RFC 8037) that verify session JWTs, by kid: the active signing key first, then " +
			"previous keys still accepted after a rotation. Cacheable for 5 minutes.",
	}), h.jwks)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-me", Method: http.MethodGet, Path: "/auth/me",
		Summary: "Current user", Tags: []string{"Authentication"},
		Description: "The caller as stored now (roles read fresh from the database), how the request authenticated " +
			"(jwt or api_token), the API token's id and scopes (api_token), or the session JWT's expiry (jwt). " +
			"401 if the user no longer exists or is disabled.",
	}), h.me)

	// ---- API tokens ----
	// Users see and change only their own tokens (another user's id answers 404); admins act on
	// all. Static paths come before /{id} ones.
	tokens := []string{"API tokens"}
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-token-scopes", Method: http.MethodGet, Path: "/api/tokens/scopes",
		Summary: "List available scopes", Tags: tokens,
		Description: "Every scope a token can be given with its meaning, then the wildcards read:* and write:*, " +
			"which match every scope of their action.",
	}), h.listScopes)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "export-tokens", Method: http.MethodGet, Path: "/api/tokens/export",
		Summary: "Export your tokens", Tags: tokens, Errors: []int{422},
		Description: "Every token of the caller (revoked and expired ones too) for backup or audit, as JSON or, with " +
			"?format=csv, as CSV. Never contains a secret or a hash.",
		Responses: exportResponses(api),
	}), h.exportTokens)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-token-audit", Method: http.MethodGet, Path: "/api/tokens/audit",
		Summary: "Token audit log", Tags: tokens, Errors: []int{422},
		Description: "Every create, update, regenerate, revoke and service-token creation, newest first: actor, time, token " +
			"id, action and what changed (never a secret). Filter with token_id.",
	}), h.tokenAuditLog)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "bulk-revoke-tokens", Method: http.MethodPost, Path: "/api/tokens/bulk-revoke",
		Summary: "Revoke several tokens", Tags: tokens, Errors: []int{409, 422},
		Description: "Revokes up to 100 tokens in one transaction and reports each id: revoked, already_revoked, or " +
			"not_found (no such token, or not yours: reported, never revoked).",
	}), h.bulkRevokeTokens)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "create-service-token", Method: http.MethodPost, Path: "/api/tokens/service",
		Summary: "Create a service token", Tags: tokens, Errors: []int{409, 422}, DefaultStatus: http.StatusCreated,
		Description: "Creates an API token for a service account (instrument and ingest scripts), creating the " +
			"account with role service first if needed. The raw token is in this response only. 409 if the name belongs " +
			"to a person's account or the account holds OPS_TOKEN_MAX_PER_USER active tokens. kind and bindings are " +
			"given when the account is created; for an existing account they must be the ones it has (409 otherwise).",
	}), h.createServiceToken)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "set-service-bindings", Method: http.MethodPut, Path: "/api/tokens/service/{username}/bindings",
		Summary: "Set a service account's kind and bindings", Tags: tokens, Errors: []int{404, 409, 422},
		Description: "Admins: replaces the kind and bindings of a service account (an instrument: instruments and/or " +
			"instrument_modules; a mover: data locations; weather: none), the one way they change after creation. " +
			"Audited (GET /api/tokens/audit, action set_bindings, with the values before and after); every token of " +
			"the account is checked against the new bindings from its next request. 404 no such account, 409 not a " +
			"service account, 422 an unknown id or bindings not of the kind.",
	}), h.setServiceBindings)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "create-token", Method: http.MethodPost, Path: "/api/tokens/",
		Summary: "Create a token", Tags: tokens, Errors: []int{409, 422}, DefaultStatus: http.StatusCreated,
		Description: "Creates an API token for the caller. The raw token (ops_api_token_...) is in this response only; " +
			"only its SHA-256 is stored. 409 when the caller already holds OPS_TOKEN_MAX_PER_USER active tokens.",
	}), h.createToken)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-tokens", Method: http.MethodGet, Path: "/api/tokens/",
		Summary: "List tokens", Tags: tokens, Errors: []int{422},
		Description: "The caller's tokens, newest first. Admins may list another user's (user_id) or everyone's (all=true).",
	}), h.listTokens)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-token", Method: http.MethodGet, Path: "/api/tokens/{id}",
		Summary: "Token details", Tags: tokens, Errors: []int{404, 422},
	}), h.getToken)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "update-token", Method: http.MethodPut, Path: "/api/tokens/{id}",
		Summary: "Update a token", Tags: tokens, Errors: []int{404, 409, 422},
		Description: "Changes the name, the scopes or the expiry (expires_in_days counted from now) of an active token; " +
			"fields left out stay as they are. 409 if the token is revoked.",
	}), h.updateToken)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "revoke-token", Method: http.MethodDelete, Path: "/api/tokens/{id}",
		Summary: "Revoke a token", Tags: tokens, Errors: []int{404, 409, 422},
		Description: "Revokes the token at once: it no longer verifies anywhere. Revoking a revoked token changes nothing. " +
			"Answers the token as it now is.",
	}), h.revokeToken)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-token-usage", Method: http.MethodGet, Path: "/api/tokens/{id}/usage",
		Summary: "Token usage statistics", Tags: tokens, Errors: []int{404, 422},
		Description: "Usage count, last use (time and client address), creation, expiry and state, exact in real time: " +
			"uses not yet committed to PostgreSQL are included (pending_uses).",
	}), h.tokenUsage)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "regenerate-token", Method: http.MethodPost, Path: "/api/tokens/{id}/regenerate",
		Summary: "Regenerate a token", Tags: tokens, Errors: []int{404, 409, 422}, DefaultStatus: http.StatusCreated,
		Description: "Revokes the token and creates its replacement with the same name and scopes and the same lifetime " +
			"length, counted from now. The new raw token is in this response only. 409 if the token is revoked.",
	}), h.regenerateToken)

	// ---- User administration (admins; the service checks the caller again). Static paths
	// come before /{id} ones. ----
	users := []string{"Users"}
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-users", Method: http.MethodGet, Path: "/api/users",
		Summary: "List users", Tags: users, Errors: []int{422},
		Description: "Users by id, with their roles and state. Filter by q (part of the username, email or display name), " +
			"role, is_active.",
	}), h.listUsers)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-user-audit", Method: http.MethodGet, Path: "/api/users/audit",
		Summary: "User audit log", Tags: users, Errors: []int{422},
		Description: "Every change to a user's roles or active flag, newest first: actor, time, user, action (disable, " +
			"enable, set_roles, grant_roles) and what changed. Filter with user_id.",
	}), h.userAuditLog)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-user", Method: http.MethodGet, Path: "/api/users/{id}",
		Summary: "User details", Tags: users, Errors: []int{404, 422},
	}), h.getUser)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "update-user", Method: http.MethodPut, Path: "/api/users/{id}",
		Summary: "Change a user's roles or disable/enable them", Tags: users, Errors: []int{404, 409, 422},
		Description: "Sets the roles (the complete new set) and/or is_active; fields left out stay as they are. Disabling a " +
			"user or taking a role away takes effect for API tokens at once and for session JWTs in every service within " +
			"5 seconds; session JWTs issued before a disable stay refused after re-enabling. Every change is audited " +
			"(who, when, before and after). 409 if it would leave no active admin.",
	}), h.updateUser)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "link-user-identity", Method: http.MethodPut, Path: "/api/users/{id}/identity",
		Summary: "Link a user to an identity-provider account", Tags: users, Errors: []int{404, 409, 422},
		Description: "Logins find their account by the identity provider's (issuer, subject) only, never by username: " +
			"a first login whose username is taken gets a new account (name-2, …). This links an existing account — " +
			"one made on the command line, or the one a person used before — to an identity, so that its logins reach " +
			"it; it replaces any identity the account had, and is audited (action link_identity). 409 if the identity " +
			"is linked to another account (unless move takes it from there), or the account is a service account " +
			"(those never log in).",
	}), h.linkIdentity)

	// ---- Internal (never routed by the gateway) ----
	// Token verification for the other services (authn.RemoteTokens): 200 Principal, 401
	// {"error":"invalid_token"}, 403 {"error":"insufficient_scope","missing":[...]}. Not in the
	// public OpenAPI document; reachable only inside the cluster (see k8s network policies).
	// Callers that do not present the internal secret count as their own client, with a
	// failed-credential budget (authn.VerifyInternal).
	huma.Register(api, h.Auth.InternalOp(huma.Operation{
		OperationID: "internal-verify-token", Method: http.MethodPost, Path: authn.VerifyPath, Hidden: true,
	}), h.verifyToken)
}
