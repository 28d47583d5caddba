// Package httpapi is the ingest service's HTTP surface.
package httpapi

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
)

// Handlers serves the ingest routes.
type Handlers struct {
	Auth *authn.Authenticator // rules come from the access table, pkg/authn/access.go
}

// Register adds every route of the ingest API role.
func Register(api huma.API, h *Handlers) {
	_ = api // business routes arrive with their issue; the chassis already serves /healthz, /readyz, /metrics.
}
