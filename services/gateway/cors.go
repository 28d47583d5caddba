package gateway

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/pkg/problem"
)

// CORS lets browser applications on the configured origins call the API. Preflight requests are
// answered by the gateway; on other requests the headers are added after the upstream answered
// (forwarding replaces the response headers), so they are present on problems too.
type CORS struct {
	any     bool
	origins map[string]bool
}

const (
	corsAllowMethods  = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, X-Request-ID"
	corsExposeHeaders = "X-Request-ID, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining"
	corsMaxAge        = "600"
)

// NewCORS returns the middleware for origins (validated by Config), or nil when the list is
// empty: no CORS headers at all.
func NewCORS(origins []string) *CORS {
	if len(origins) == 0 {
		return nil
	}
	c := &CORS{origins: map[string]bool{}}
	for _, o := range origins {
		if o == "*" {
			c.any = true
		}
		c.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return c
}

// Handler is the Fiber middleware.
func (cc *CORS) Handler(c *fiber.Ctx) error {
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return c.Next()
	}
	allowed := cc.any || cc.origins[strings.ToLower(origin)]
	if c.Method() == fiber.MethodOptions && c.Get(fiber.HeaderAccessControlRequestMethod) != "" {
		c.Vary(fiber.HeaderOrigin, fiber.HeaderAccessControlRequestMethod, fiber.HeaderAccessControlRequestHeaders)
		if !allowed {
			return problem.New(fiber.StatusForbidden, "origin "+origin+" is not allowed to call this API (OPS_CORS_ORIGINS)")
		}
		cc.allowOrigin(c, origin)
		c.Set(fiber.HeaderAccessControlAllowMethods, corsAllowMethods)
		c.Set(fiber.HeaderAccessControlAllowHeaders, corsAllowHeaders)
		c.Set(fiber.HeaderAccessControlMaxAge, corsMaxAge)
		return c.SendStatus(fiber.StatusNoContent)
	}
	err := c.Next()
	if !cc.any {
		c.Vary(fiber.HeaderOrigin)
	}
	if allowed {
		cc.allowOrigin(c, origin)
		c.Set(fiber.HeaderAccessControlExposeHeaders, corsExposeHeaders)
	}
	return err
}

func (cc *CORS) allowOrigin(c *fiber.Ctx, origin string) {
	if cc.any {
		c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
		return
	}
	c.Set(fiber.HeaderAccessControlAllowOrigin, origin)
}
