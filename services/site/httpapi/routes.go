// Package httpapi is the site service's HTTP surface.
package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"

	"github.com/obsops/obsops/services/site"
)

// Handlers serves the public site endpoints.
type Handlers struct {
	Auth    *authn.Authenticator
	Info    site.Info
	Health  *site.Checker
	Buffers *site.BufferInspector
}

// Register adds every route of the site service: all anonymous (SPEC §4.5, public monitoring),
// as the access table says.
func Register(api huma.API, h *Handlers) {
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-site-info", Method: http.MethodGet, Path: "/api/site/info",
		Summary: "Site configuration", Tags: []string{"Site information"},
		Description: "Site name and type, observatory location, elevation limits, Sun avoidance, whether critical operations are buffered, and the running version.",
	}), h.getInfo)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-health", Method: http.MethodGet, Path: "/health",
		Summary: "Health check of the whole suite", Tags: []string{"Site information"},
		Description: "Overall status (ok, degraded, down), the database and Redis, and the readiness of every service with its latency. Answers 503 when down.",
		Responses:   map[string]*huma.Response{"503": {Description: "The suite is down (database or Redis unreachable); the body is the same report."}},
	}), h.getHealth)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-buffer-stats", Method: http.MethodGet, Path: "/buffer-stats",
		Summary: "Buffer statistics", Tags: []string{"Site information"},
		Description: "State of the critical-write buffer (asynq queue `ingest`): pending, active, scheduled, retry, archived (dead letters), processed and failed totals, oldest pending age.",
	}), h.getBufferStats)
}
