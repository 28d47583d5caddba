// Package authn authenticates and authorises requests in every obsops service, for both kinds
// of credential: session JWTs (verified locally against the authtoken service's JWKS) and API
// tokens (verified by the authtoken service, which owns their table and usage counters; other
// services reuse a verification in process for up to a second, see CachedTokens).
//
// Routes declare what they accept with a Rule (the access table, access.go); the Authenticator turns
// a rule into huma or Fiber middleware that answers 401 (with WWW-Authenticate: Bearer), 403
// (problem insufficient_scope or forbidden) or 429 (too many failed attempts from one address).
package authn

import (
	"context"
	"slices"
	"time"
)

// Roles a user can hold.
const (
	RoleAdmin    = "admin"    // resets, reconciles, precalculation, service tokens, all tokens
	RoleObserver = "observer" // writes observing programs
	RoleViewer   = "viewer"   // reads
	RoleService  = "service"  // instrument and ingest scripts (service accounts)
)

// ValidRole reports whether r is a known role.
func ValidRole(r string) bool {
	return r == RoleAdmin || r == RoleObserver || r == RoleViewer || r == RoleService
}

// Method is how a request authenticated.
type Method string

// Credential kinds.
const (
	MethodJWT      Method = "jwt"       // session JWT from /idp/login or `authtoken admin issue-jwt`
	MethodAPIToken Method = "api_token" // ops_api_token_...
)

// Principal is the authenticated caller.
type Principal struct {
	UserID   int64    `json:"user_id"`
	Username string   `json:"username"`
	Roles    []string `json:"roles"`
	Method   Method   `json:"method"`
	TokenID  int64    `json:"token_id,omitempty"` // API tokens only
	Scopes   []string `json:"scopes,omitempty"`   // API tokens only
	// ExpiresAt is when the session JWT expires (UTC; session JWTs only).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Service is the kind and bindings of a service account's API token (nil for everyone
	// else). It travels with the verified token (authtoken's cached record, CachedTokens), so
	// ingest and transfer check ownership in memory, with no lookup per request.
	Service *ServiceBinding `json:"service,omitempty"`

	// use is the counting of this verification's use while the request runs, for a token verified
	// from the cache (CachedTokens); nil when it was counted before the principal was returned.
	use *pendingUse
}

// UseCounted waits until the use of the API token that verified p is counted and tells whether
// it could not be: a token verified from a service's cache has its use counted while the request
// runs (CachedTokens), and the middleware calls this after the handler, before the answer is
// sent, so an answered request's use is committed (SPEC 5.2, rule 4). Nil at once for every other
// principal.
func (p *Principal) UseCounted(ctx context.Context) error {
	if p == nil || p.use == nil {
		return nil
	}
	select {
	case <-p.use.done:
		return p.use.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kinds of service account (users.service_kind): what a service account is for, and so what
// it may own. An account without a kind (created before kinds existed, or without one) is
// refused by every route that checks ownership until an admin gives it one.
const (
	KindInstrument = "instrument" // writes its instrument modules' executions, files and packages (ingest)
	KindMover      = "mover"      // moves data between its data locations (transfer agent API)
	KindWeather    = "weather"    // weather station: no bindings, no ingest or agent writes
)

// ValidServiceKind reports whether k is a kind of service account.
func ValidServiceKind(k string) bool {
	return k == KindInstrument || k == KindMover || k == KindWeather
}

// ServiceBinding is a service account's kind and what it is bound to: for an instrument, its
// instruments and instrument modules; for a mover, its data locations (ids of data_locations).
type ServiceBinding struct {
	Kind string `json:"kind"` // "" when the account has no kind yet
	// Instruments bound whole (every module of each is the account's).
	Instruments []int64 `json:"instruments,omitempty"`
	// Modules are every instrument module the account owns: those bound one by one and those
	// of its bound instruments (expanded when the token is verified).
	Modules   []int64 `json:"instrument_modules,omitempty"`
	Locations []int64 `json:"locations,omitempty"`
}

// ServiceKind is the kind of the principal's service account ("" for anyone else, or a service
// account without a kind).
func (p *Principal) ServiceKind() string {
	if p == nil || p.Service == nil {
		return ""
	}
	return p.Service.Kind
}

// OwnsModule reports whether the principal is an instrument account bound to instrument module
// id (directly or through its instrument).
func (p *Principal) OwnsModule(id int64) bool {
	return p.ServiceKind() == KindInstrument && slices.Contains(p.Service.Modules, id)
}

// OwnsLocation reports whether the principal is a mover bound to data location id.
func (p *Principal) OwnsLocation(id int64) bool {
	return p.ServiceKind() == KindMover && slices.Contains(p.Service.Locations, id)
}

// HasRole reports whether the principal holds any of roles.
func (p *Principal) HasRole(roles ...string) bool {
	for _, r := range roles {
		if slices.Contains(p.Roles, r) {
			return true
		}
	}
	return false
}

// IsAdmin reports whether the principal holds the admin role.
func (p *Principal) IsAdmin() bool { return p.HasRole(RoleAdmin) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the authenticated caller of a request, or nil on anonymous routes.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Rule says which credentials a route accepts. The zero Rule accepts nothing; use the
// constructors below, which name the kinds of rule of the access table (access.go).
type Rule struct {
	Anonymous  bool     // no credential needed
	JWT        bool     // session JWTs accepted
	JWTRoles   []string // with JWT: the user must hold one of these (empty: any user)
	Token      bool     // API tokens accepted
	TokenRoles []string // with a token: its user must hold one of these (empty: any user)
	Scopes     []string // with a token: it must carry every one of these (wildcards match)
}

// Anonymous accepts every request.
func Anonymous() Rule { return Rule{Anonymous: true} }

// AnyUser accepts a session JWT of any user; API tokens are refused.
func AnyUser() Rule { return Rule{JWT: true} }

// Roles accepts a session JWT of a user holding one of roles (e.g. admin routes).
func Roles(roles ...string) Rule { return Rule{JWT: true, JWTRoles: roles} }

// UserOrScopes accepts a session JWT of any user, or an API token carrying scopes.
func UserOrScopes(scopes ...string) Rule { return Rule{JWT: true, Token: true, Scopes: scopes} }

// ServiceAccount accepts only an API token of a user with the service role carrying scopes;
// a JWT is refused with 403.
func ServiceAccount(scopes ...string) Rule {
	return Rule{Token: true, TokenRoles: []string{RoleService}, Scopes: scopes}
}

// AdminOrServiceAccount accepts an admin's session JWT, or an API token of a service account
// carrying scopes (a machine feeding data an admin may also correct by hand); the service then
// checks the account's kind and bindings — an instrument bound to the record's module, a weather
// station — and other users' JWTs and tokens are refused with 403.
func AdminOrServiceAccount(scopes ...string) Rule {
	return Rule{JWT: true, JWTRoles: []string{RoleAdmin}, Token: true, TokenRoles: []string{RoleService}, Scopes: scopes}
}

// AnyCredential accepts any valid JWT or API token, whatever its scopes.
func AnyCredential() Rule { return Rule{JWT: true, Token: true} }
