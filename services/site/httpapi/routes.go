// Package httpapi is the site service's HTTP surface.
package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/site"
)

// Handlers serves the public site endpoints.
type Handlers struct {
	Auth    *authn.Authenticator
	Info    site.Info
	Health  *site.Checker
	Monitor *site.Monitor // the main link, replica and buffer, for /buffer-stats and the info's status
	Weather *weather.Store
	// Observatory is the observatory's status as polled from the main site; nil when none is
	// configured (GET /api/site/observatory answers 404).
	Observatory *site.Observatory
}

// Register adds every route of the site service: the reads anonymous (public monitoring), the
// weather's writes for admins and weather service accounts, as the access table says.
func Register(api huma.API, h *Handlers) {
	weatherTags := []string{"Weather"}
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "post-weather", Method: http.MethodPost, Path: "/api/site/weather",
		Summary: "Store weather readings", Tags: weatherTags, Errors: []int{401, 403, 409, 422, 503},
		Description: "Stores 1-1000 PWV readings in one statement (all or none): measurements (kind measurement, e.g. source " +
			"\"radiometer\") and forecast points (kind forecast, the model as source, issued_at the run). A point already " +
			"stored (same kind, source, time and run) takes the new value. An admin's session JWT, or a service account's " +
			"API token with write:weather. 422 names the field of the first invalid reading (body.items[i].pwv_mm).",
	}), h.postWeather)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-weather", Method: http.MethodGet, Path: "/api/site/weather",
		Summary: "Weather series", Tags: weatherTags, Errors: []int{422},
		Description: "PWV readings with from <= time < to (default the last 24 h and the next 72 h, at most 31 days), by " +
			"time, a page of limit (default 500, at most 5000) with next_cursor; now: the PWV now as planning uses it " +
			"(the latest measurement within 30 minutes, else unknown). Anonymous.",
	}), h.getWeather)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-site-info", Method: http.MethodGet, Path: "/api/site/info",
		Summary: "Site configuration", Tags: []string{"Site information"},
		Description: "Site name and type, observatory location, elevation limits, Sun avoidance, whether critical operations are buffered, the running version, " +
			"and `status` (at most a few seconds old): the main site's database reachable or not and since when, the local replica's lag (secondary sites), the buffer's backlog, oldest pending age, replay rate and last replay.",
	}), h.getInfo)
	health := h.Auth.Op(huma.Operation{
		OperationID: "get-health", Method: http.MethodGet, Path: "/health",
		Summary: "Health check of the whole suite", Tags: []string{"Site information"},
		Description: "Overall status (ok, degraded, down), the database and Redis, the readiness of every service with its latency, the buffer, " +
			"the main site's database (`main`) and, at a secondary site, the local replica's lag (`replica`). A secondary site whose main is unreachable is degraded, not down: reads and buffered writes go on. Answers 503 when down. " +
			"Anonymous callers get a report at most about a second old, with failures named in general terms; an admin's session JWT gets a fresh report with the full errors (`detail`).",
		Responses: map[string]*huma.Response{"503": {Description: "The suite is down (database or Redis unreachable); the body is the same report."}},
	})
	health.Middlewares = append(health.Middlewares, adminView(h.Auth))
	huma.Register(api, health, h.getHealth)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-buffer-stats", Method: http.MethodGet, Path: "/buffer-stats",
		Summary: "Buffer statistics", Tags: []string{"Site information"},
		Description: "State of the critical-write buffer (asynq queue `ingest`): pending, active, scheduled, retry, archived (dead letters), processed and failed totals, oldest pending age, " +
			"replay rate and last replay, the main site's database reachable or not and since when, and at a secondary site the local replica's lag (received vs replayed WAL bytes, seconds, bytes behind the main).",
	}), h.getBufferStats)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-site-observatory", Method: http.MethodGet, Path: "/api/site/observatory",
		Summary: "The observatory's status, seen from the main site", Tags: []string{"Site information"}, Errors: []int{404},
		Description: "At the main site, the observatory's (the secondary site's) `/buffer-stats` as this site last read it across the WAN " +
			"(polled every 2 s from OPS_OBSERVATORY_STATUS_URL): `status` (kept while the observatory is unreachable), `reachable`, " +
			"`checked_at` (the latest poll), `last_seen` (the last answer) and, while it does not answer, `unreachable_since`. " +
			"404 when no observatory is configured (at a secondary site always). Anonymous.",
	}), h.getObservatory)
}

// adminView lets an anonymous route tell an admin apart: when the request carries a credential
// that verifies as an admin's session JWT, the handler sees that principal. Any other credential
// is ignored (the route stays anonymous); a failed one still counts against the address's
// failed-authentication budget.
func adminView(auth *authn.Authenticator) func(huma.Context, func(huma.Context)) {
	rule := authn.Roles(authn.RoleAdmin)
	return func(ctx huma.Context, next func(huma.Context)) {
		if authz := ctx.Header("Authorization"); authz != "" {
			ip := service.ClientIP(humafiber.UnwrapV2(ctx))
			if p, f := auth.Authenticate(ctx.Context(), authz, ip, rule); f == nil && p != nil {
				ctx = huma.WithContext(ctx, authn.WithPrincipal(ctx.Context(), p))
			}
		}
		next(ctx)
	}
}
