// Package httpapi is the catalog service's HTTP surface.
package httpapi

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
)

// Handlers serves the catalog routes.
type Handlers struct {
	Auth       *authn.Authenticator // rules come from the access table, pkg/authn/access.go
	Visibility *Visibility          // the /visibility routes (visibility.go)
}

// Register adds every route of the catalog service.
func Register(api huma.API, h *Handlers) {
	_ = api                    // business routes arrive with their issue; the chassis already serves /healthz, /readyz, /metrics.
	registerVisibility(api, h) // GET /visibility/heatmap, GET /visibility/{source_id}, POST /visibility/precalculate, GET /visibility/precalculate/{job_id}
}
