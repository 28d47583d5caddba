// Package httpapi is the gateway's HTTP surface: the routing table applied to the Fiber app.
package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/gateway"
)

// Register mounts every routed prefix on app. Anything else (including /internal/* and the
// services' own /metrics, /healthz, /readyz) is not routed and gets the gateway's 404 problem.
func Register(app *fiber.App, upstreams map[string]*gateway.Upstream) {
	app.Use(func(c *fiber.Ctx) error {
		if p := c.Path(); p == "/internal" || strings.HasPrefix(p, "/internal/") {
			return problem.New(fiber.StatusNotFound, "no route for "+c.Method()+" "+p)
		}
		return c.Next()
	})
	for _, r := range gateway.Routes() {
		h := upstreams[r.Service].Forward
		app.All(r.Prefix, h)
		app.All(r.Prefix+"/*", h)
	}
}
