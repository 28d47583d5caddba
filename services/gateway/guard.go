package gateway

import (
	"bytes"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/pkg/contract"
)

// Guard refuses, with the gateway's 404 problem (fiber.ErrNotFound, which problem.ErrorHandler
// renders exactly like an unknown route), what must never reach a service: /internal and
// everything under it (any letter case), and paths with dot segments ("/api/site/../metrics",
// also percent-encoded), which clients never need and which upstreams might resolve differently
// from the gateway's routing.
func Guard(c *fiber.Ctx) error {
	p := c.Path()
	if internal(p) {
		return fiber.ErrNotFound
	}
	raw := c.Request().Header.RequestURI()
	if i := bytes.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	if bytes.IndexByte(raw, '.') >= 0 || bytes.IndexByte(raw, '%') >= 0 {
		decoded, err := url.PathUnescape(string(raw))
		if err != nil || hasDotSegment(decoded) {
			return fiber.ErrNotFound
		}
		if internal(decoded) {
			return fiber.ErrNotFound
		}
	}
	return c.Next()
}

// internal reports whether p is contract.InternalPrefix or under it, in any letter case.
func internal(p string) bool {
	n := len(contract.InternalPrefix)
	return hasPrefixFold(p, contract.InternalPrefix) && (len(p) == n || p[n] == '/')
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// hasDotSegment reports whether a path has a "." or ".." segment (or a backslash, which some
// servers treat as a separator).
func hasDotSegment(p string) bool {
	if strings.ContainsRune(p, '\\') {
		return true
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
