package gateway

import (
	"context"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/problem"
)

// Per-route limits. One global body limit and one request budget per credential do not fit the
// ingest routes: a bulk registration of 10,000 files is several MiB, and an instrument's service
// account registers hundreds of files per second all night. So:
//
//   - body limits per route: every route keeps OPS_BODY_LIMIT_BYTES except the large-body routes
//     below, which get OPS_INGEST_BULK_BODY_LIMIT_BYTES (the server accepts bodies up to the
//     largest limit; BodyLimits refuses the rest with the same 413 problem);
//   - rate limits per route class: the ingest class (its write and read routes, receipts) has its
//     own budget per credential, OPS_RATE_LIMIT_INGEST_PER_MINUTE, counted apart from the default
//     budget (OPS_RATE_LIMIT_PER_MINUTE), which every other route keeps.

// LargeBodyRoutes are the routes (method and exact path) whose bodies may exceed the default
// limit, up to the bulk limit: the bulk registration, and a target list's import (whose own,
// smaller limit the catalog holds it to, OPS_CATALOG_IMPORT_BODY_LIMIT_BYTES).
func LargeBodyRoutes() []string { return []string{"POST /raw_data_files/bulk", "POST /sources/import"} }

// ingestClassPrefixes are the path prefixes of the ingest rate-limit class: those the routing
// table gives the ingest service, so a prefix added there is in the class too.
func ingestClassPrefixes() []string {
	var out []string
	for _, r := range Routes() {
		if r.Service == "ingest" {
			out = append(out, r.Prefix)
		}
	}
	return out
}

// BodyLimits refuses bodies over their route's limit with a 413 problem.
type BodyLimits struct {
	Default, Large int
	large          map[string]bool
}

// NewBodyLimits returns the per-route body limits.
func NewBodyLimits(defaultLimit, large int) *BodyLimits {
	b := &BodyLimits{Default: defaultLimit, Large: large, large: map[string]bool{}}
	for _, r := range LargeBodyRoutes() {
		b.large[r] = true
	}
	return b
}

// Max is the largest limit: what the server itself must accept.
func (b *BodyLimits) Max() int { return max(b.Default, b.Large) }

// Handler is the Fiber middleware.
func (b *BodyLimits) Handler(c *fiber.Ctx) error {
	n := len(c.Request().Body())
	if n <= b.Default {
		return c.Next()
	}
	limit := b.Default
	if b.large[c.Method()+" "+strings.TrimSuffix(c.Path(), "/")] || b.large[c.Method()+" "+c.Path()] {
		limit = b.Large
	}
	if n > limit {
		return problem.New(fiber.StatusRequestEntityTooLarge, "request body exceeds the limit of "+strconv.Itoa(limit)+" bytes for "+c.Method()+" "+c.Path())
	}
	return c.Next()
}

// ClassLimiter applies the ingest class's limiter to its routes when the caller's credential has
// verified (anonymous callers and unverified credentials never get the ingest class: they keep
// the default budget of their address everywhere), and the default limiter to everything else;
// either may be nil (that class is not limited). Both must share known.
type ClassLimiter struct {
	Default  *RateLimiter
	Ingest   *RateLimiter
	known    *KnownCredentials
	prefixes []string
}

// NewClassLimiter returns the rate limiter by route class; def and ingest learn verified
// credentials into known.
func NewClassLimiter(def, ingest *RateLimiter, known *KnownCredentials) *ClassLimiter {
	return &ClassLimiter{Default: def, Ingest: ingest, known: known, prefixes: ingestClassPrefixes()}
}

// InIngestClass reports whether path belongs to the ingest class (whole segments).
func (cl *ClassLimiter) InIngestClass(path string) bool {
	for _, p := range cl.prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// Handler is the Fiber middleware.
func (cl *ClassLimiter) Handler(c *fiber.Ctx) error {
	fp, budget := cl.known.credential(c)
	l := cl.Default
	if budget != "" && cl.InIngestClass(c.Path()) {
		l = cl.Ingest
	}
	if l == nil {
		return c.Next()
	}
	return l.handle(c, fp, budget)
}

// PrefixedScripter runs the rate-limit script with every key prefixed, so a class's limiter
// counts in Redis apart from the default one for the same credential.
type PrefixedScripter struct {
	redis.Scripter
	Prefix string
}

func (p PrefixedScripter) keys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.Prefix + k
	}
	return out
}

// Eval runs script with prefixed keys.
func (p PrefixedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.Scripter.Eval(ctx, script, p.keys(keys), args...)
}

// EvalSha runs a loaded script with prefixed keys.
func (p PrefixedScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.Scripter.EvalSha(ctx, sha1, p.keys(keys), args...)
}

// EvalRO runs a read-only script with prefixed keys.
func (p PrefixedScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.Scripter.EvalRO(ctx, script, p.keys(keys), args...)
}

// EvalShaRO runs a loaded read-only script with prefixed keys.
func (p PrefixedScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.Scripter.EvalShaRO(ctx, sha1, p.keys(keys), args...)
}
