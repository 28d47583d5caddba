// Package httpapi is the transfer service's HTTP surface.
package httpapi

import "github.com/danielgtaylor/huma/v2"

// Handlers serves the transfer routes.
type Handlers struct{}

// Register adds every route of the transfer service.
func Register(api huma.API, h *Handlers) {
	_ = api // business routes arrive with their issue; the chassis already serves /healthz, /readyz, /metrics.
}
