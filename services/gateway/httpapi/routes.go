// Package httpapi is the gateway's HTTP surface: the whole public surface of obsops in one place.
package httpapi

import (
	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/services/gateway"
)

// Deps are what the gateway's routes need; CORS and Limiter are nil when disabled.
type Deps struct {
	Upstreams map[string]*gateway.Upstream // by service name
	CORS      *gateway.CORS
	Limiter   *gateway.RateLimiter
	// IngestLimiter is the ingest route class's own budget (nil: that class is not limited);
	// BodyLimits the per-route body limits (nil: the server's limit only).
	IngestLimiter *gateway.RateLimiter
	// Known is the verified credentials both limiters learn and share.
	Known      *gateway.KnownCredentials
	BodyLimits *gateway.BodyLimits
	OpenAPI    *gateway.OpenAPI
	Docs       *gateway.Docs
	// Console is the web console served at /console/ (embedded assets).
	Console *gateway.Console
}

// Register mounts the gateway's surface on app, after the chassis' request id, access log,
// panic recovery, server body-size limit (413) and its own /healthz, /readyz, /metrics. In order
// (per-route body limits, 413, right after the guard):
//
//  1. CORS: preflights answered here; headers added to every answer, problems included.
//  2. Guard: /internal/* and dot-segment paths get the gateway's 404 problem.
//  3. Rate limit (429 + Retry-After) for everything below, per route class (routelimits.go).
//  4. /openapi.json (merged document of all services), /docs (offline Swagger UI) and
//     /console/ (the web console: embedded static assets, docs/console.md).
//  5. Every prefix of the routing table to its service, WebSocket upgrades tunnelled.
//
// Anything else, including the services' own /metrics, /healthz and /readyz, which are under
// no routed prefix, gets the gateway's 404 problem.
func Register(app *fiber.App, d Deps) {
	if d.CORS != nil {
		app.Use(d.CORS.Handler)
	}
	app.Use(gateway.Guard)
	if d.BodyLimits != nil {
		app.Use(d.BodyLimits.Handler)
	}

	if d.Limiter != nil || d.IngestLimiter != nil {
		app.Use(gateway.NewClassLimiter(d.Limiter, d.IngestLimiter, d.Known).Handler) // per route class: routelimits.go
	}

	app.Get("/openapi.json", d.OpenAPI.Handler)
	app.Get("/docs", d.Docs.Handler)
	app.Get("/docs/*", d.Docs.Handler)
	app.Get("/console", d.Console.Handler)
	app.Get("/console/*", d.Console.Handler)
	for _, r := range gateway.Routes() {
		h := d.Upstreams[r.Service].Forward
		app.All(r.Prefix, h)
		app.All(r.Prefix+"/*", h)
	}
}
