// Package gateway is the thin edge of obsops: it routes every public path prefix to the service
// that owns it and answers only for itself (unknown route, oversize body, rate limit, upstream
// failure), always as problem+json. It holds no business logic.
package gateway

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/config"
)

// Config is the gateway's configuration.
type Config struct {
	config.Common
	config.Upstreams
	Addr string `env:"OPS_GATEWAY_ADDR" envDefault:"127.0.0.1:8080"` // the public listener
	// MetricsAddr serves the gateway's own /metrics, apart from the public listener.
	MetricsAddr     string        `env:"OPS_GATEWAY_METRICS_ADDR" envDefault:"127.0.0.1:9080"`
	UpstreamTimeout time.Duration `env:"OPS_UPSTREAM_TIMEOUT" envDefault:"30s"`     // bounds one forwarded request (504 beyond)
	DialTimeout     time.Duration `env:"OPS_UPSTREAM_DIAL_TIMEOUT" envDefault:"2s"` // bounds one connection attempt (504 beyond)
	// PipelineDepth is how many requests may be in flight on one upstream connection; only
	// bodiless GET/HEAD requests share connections. 1 disables pipelining.
	PipelineDepth int `env:"OPS_UPSTREAM_PIPELINE_DEPTH" envDefault:"8"`
	// PipelineWindow is how long after a connection's oldest request was sent others may still
	// join it: the bound on how long a read can be held up behind a slow one it joined.
	PipelineWindow time.Duration `env:"OPS_UPSTREAM_PIPELINE_WINDOW" envDefault:"2ms"`
	// CORSOrigins are the browser origins allowed to call the API (comma-separated, or * for
	// any); empty sends no CORS headers at all.
	CORSOrigins []string `env:"OPS_CORS_ORIGINS" envSeparator:","`
	// RateLimitPerMinute is the number of requests one credential (or, without one, one client
	// address) may make in any sliding minute; 0 disables rate limiting.
	RateLimitPerMinute int `env:"OPS_RATE_LIMIT_PER_MINUTE" envDefault:"1200"`
	// RateLimitIngestPerMinute is the separate budget per credential of the ingest routes
	// (the ingest service's prefixes of Routes): instruments register hundreds of files per second. 0: unlimited.
	RateLimitIngestPerMinute int `env:"OPS_RATE_LIMIT_INGEST_PER_MINUTE" envDefault:"600000"`
	// AnonymousBodyLimitBytes is the most a request without a credential (no Authorization
	// header) may send to any route: a larger body is refused from its headers, before it is read
	// (401 where the route needs a credential, else 413). Never above OPS_BODY_LIMIT_BYTES.
	AnonymousBodyLimitBytes int `env:"OPS_ANONYMOUS_BODY_LIMIT_BYTES" envDefault:"65536"`
	// BulkBodyLimitBytes is the body limit of the large-body routes (LargeBodyRoutes); every
	// other route keeps OPS_BODY_LIMIT_BYTES.
	BulkBodyLimitBytes int `env:"OPS_INGEST_BULK_BODY_LIMIT_BYTES" envDefault:"16777216"`
	// RateLimitRedisTimeout bounds the Redis round trip of one rate-limit decision; a slower or
	// failed Redis lets the request through (fail open).
	RateLimitRedisTimeout time.Duration `env:"OPS_RATE_LIMIT_REDIS_TIMEOUT" envDefault:"100ms"`
	// OpenAPICacheTTL is how long the merged OpenAPI document is served from memory when every
	// service answered (a document with a missing service is refreshed after a few seconds).
	OpenAPICacheTTL time.Duration `env:"OPS_OPENAPI_CACHE_TTL" envDefault:"60s"`
	// TrustedProxies are the addresses or CIDR ranges of proxies in front of the gateway (an
	// ingress) whose ProxyHeader names the real client; empty trusts none.
	TrustedProxies []string `env:"OPS_TRUSTED_PROXIES" envSeparator:","`
	// ProxyHeader is the header a trusted proxy sets to the client address, e.g. X-Real-IP.
	ProxyHeader string `env:"OPS_PROXY_HEADER"`
}

// Validate checks the gateway settings.
func (c *Config) Validate() error {
	if c.UpstreamTimeout <= 0 {
		return &config.Invalid{Var: "OPS_UPSTREAM_TIMEOUT", Reason: "must be positive"}
	}
	if c.DialTimeout <= 0 {
		return &config.Invalid{Var: "OPS_UPSTREAM_DIAL_TIMEOUT", Reason: "must be positive"}
	}
	if c.PipelineDepth < 1 || c.PipelineDepth > 64 {
		return &config.Invalid{Var: "OPS_UPSTREAM_PIPELINE_DEPTH", Reason: "must be between 1 (no pipelining) and 64"}
	}
	if c.PipelineWindow < 0 || c.PipelineWindow > time.Second {
		return &config.Invalid{Var: "OPS_UPSTREAM_PIPELINE_WINDOW", Reason: "must be between 0 and 1s"}
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return &config.Invalid{Var: "OPS_GATEWAY_ADDR", Reason: "must be host:port"}
	}
	if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil || c.MetricsAddr == c.Addr {
		return &config.Invalid{Var: "OPS_GATEWAY_METRICS_ADDR", Reason: "must be host:port, apart from OPS_GATEWAY_ADDR"}
	}
	origins := cleanList(c.CORSOrigins)
	for _, o := range origins {
		if !validOrigin(o) {
			return &config.Invalid{Var: "OPS_CORS_ORIGINS", Reason: "invalid origin " + strconv.Quote(o) + ": expected scheme://host[:port] or *"}
		}
	}
	if len(origins) > 1 && slices.Contains(origins, "*") {
		return &config.Invalid{Var: "OPS_CORS_ORIGINS", Reason: "* must be the only entry"}
	}
	c.CORSOrigins = origins
	if c.RateLimitPerMinute < 0 {
		return &config.Invalid{Var: "OPS_RATE_LIMIT_PER_MINUTE", Reason: "must be >= 0 (0 disables rate limiting)"}
	}
	if c.RateLimitIngestPerMinute < 0 {
		return &config.Invalid{Var: "OPS_RATE_LIMIT_INGEST_PER_MINUTE", Reason: "must be >= 0 (0 disables the ingest class's limit)"}
	}
	if c.BulkBodyLimitBytes < 1<<20 || c.BulkBodyLimitBytes > 1<<30 {
		return &config.Invalid{Var: "OPS_INGEST_BULK_BODY_LIMIT_BYTES", Reason: "must be within [1 MiB, 1 GiB]"}
	}
	if c.AnonymousBodyLimitBytes < 1024 {
		return &config.Invalid{Var: "OPS_ANONYMOUS_BODY_LIMIT_BYTES", Reason: "must be at least 1 KiB"}
	}
	c.AnonymousBodyLimitBytes = min(c.AnonymousBodyLimitBytes, c.BodyLimitBytes) // never above the default
	if c.RateLimitRedisTimeout <= 0 {
		return &config.Invalid{Var: "OPS_RATE_LIMIT_REDIS_TIMEOUT", Reason: "must be positive"}
	}
	if c.OpenAPICacheTTL <= 0 {
		return &config.Invalid{Var: "OPS_OPENAPI_CACHE_TTL", Reason: "must be positive"}
	}
	proxies, err := config.Networks("OPS_TRUSTED_PROXIES", c.TrustedProxies)
	if err != nil {
		return err
	}
	c.TrustedProxies = proxies
	if c.ProxyHeader != "" && !validHeaderName(c.ProxyHeader) {
		return &config.Invalid{Var: "OPS_PROXY_HEADER", Reason: "invalid header name " + strconv.Quote(c.ProxyHeader)}
	}
	if c.ProxyHeader != "" && len(proxies) == 0 {
		return &config.Invalid{Var: "OPS_PROXY_HEADER", Reason: "needs OPS_TRUSTED_PROXIES (the header is honoured only from those)"}
	}
	return nil
}

// cleanList trims the entries of a comma-separated setting and drops empty ones.
func cleanList(in []string) []string {
	var out []string
	for _, v := range in {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		out = append(out, v)
	}
	return out
}

// validOrigin accepts * or a bare origin: scheme://host[:port] with no path, query or fragment.
func validOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		(u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

func validHeaderName(h string) bool {
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return h != ""
}

// Route maps a public path prefix to the service that owns it.
type Route struct {
	Prefix  string // matched on whole path segments: /sources matches /sources and /sources/x, not /sourcesx
	Service string // the owner's name, a key of config.Upstreams.ByService
}

// Routes is the gateway's routing table: every public path prefix of the API (docs/api.md) and the
// service owning it.
func Routes() []Route {
	return []Route{
		{"/api/transfer", "transfer"},
		{"/observing_program", "catalog"},
		{"/sources", "catalog"},
		{"/visibility", "catalog"},
		{"/instruments", "catalog"},
		{"/executed_obs_units", "ingest"},
		{"/raw_data_files", "ingest"},
		{"/raw_data_package", "ingest"},
		{"/api/ingest", "ingest"},
		{"/auth", "authtoken"},
		{"/idp", "authtoken"},
		{"/api/tokens", "authtoken"},
		{"/api/users", "authtoken"},
		{"/.well-known/jwks.json", "authtoken"},
		{"/api/site", "site"},
		{"/health", "site"},
		{"/buffer-stats", "site"},
	}
}

// Routed reports whether path is under one of service's prefixes (whole segments). The merged
// OpenAPI document keeps only such paths, so it shows exactly what the gateway serves.
func Routed(service, path string) bool {
	for _, r := range Routes() {
		if r.Service == service && (path == r.Prefix || strings.HasPrefix(path, r.Prefix+"/")) {
			return true
		}
	}
	return false
}
