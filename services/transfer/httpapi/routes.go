// Package httpapi is the transfer service's HTTP surface.
package httpapi

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
)

// Handlers serves the transfer routes.
type Handlers struct {
	Auth *authn.Authenticator // rules come from the access table, pkg/authn/access.go
}

// Register adds every route of the transfer service.
func Register(api huma.API, h *Handlers) {
	_ = api // business routes arrive with their issue; the chassis already serves /healthz, /readyz, /metrics.
}
