// Package httpapi is the ingest service's HTTP surface.
package httpapi

import "github.com/danielgtaylor/huma/v2"

// Handlers serves the ingest routes.
type Handlers struct{}

// Register adds every route of the ingest API role.
func Register(api huma.API, h *Handlers) {
	_ = api // business routes arrive with their issue; the chassis already serves /healthz, /readyz, /metrics.
}
