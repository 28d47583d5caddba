// Package httpapi is the authtoken service's HTTP surface.
package httpapi

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// Handlers serves the identity and token routes.
type Handlers struct {
	Auth   *authn.Authenticator
	Users  *postgres.Users
	Keys   *signing.KeyRing
	Issuer *signing.Issuer
	Tokens *authtoken.TokenService
}

// Register adds every route of the authtoken service. Access rules come from the suite's access
// table (pkg/authn/access.go) through Auth.Op.
func Register(api huma.API, h *Handlers) {
	// ---- Identity: login through the identity provider, session JWTs, JWKS, current user ----

	// ---- API tokens (SPEC §4.4) ----

	// ---- Internal (never routed by the gateway) ----
}
