// Package gateway is the thin edge of obsops: it routes every public path prefix to the service
// that owns it and answers only for itself (unknown route, oversize body, rate limit, upstream
// failure), always as problem+json. It holds no business logic.
package gateway

import (
	"time"

	"github.com/obsops/obsops/pkg/config"
)

// Config is the gateway's configuration.
type Config struct {
	config.Common
	config.Upstreams
	Addr            string        `env:"OPS_GATEWAY_ADDR" envDefault:"127.0.0.1:8080"`
	UpstreamTimeout time.Duration `env:"OPS_UPSTREAM_TIMEOUT" envDefault:"30s"`
	DialTimeout     time.Duration `env:"OPS_UPSTREAM_DIAL_TIMEOUT" envDefault:"2s"`
}

// Validate checks the gateway settings.
func (c *Config) Validate() error {
	if c.UpstreamTimeout <= 0 || c.DialTimeout <= 0 {
		return &config.Invalid{Var: "OPS_UPSTREAM_TIMEOUT", Reason: "timeouts must be positive"}
	}
	return nil
}

// Route maps a public path prefix to the service that owns it.
type Route struct {
	Prefix  string // matched on whole path segments: /sources matches /sources and /sources/x, not /sourcesx
	Service string
}

// Routes is the routing table of DESIGN §2: every prefix of SPEC §1 and the service owning it.
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
		{"/auth", "authtoken"},
		{"/idp", "authtoken"},
		{"/api/tokens", "authtoken"},
		{"/.well-known/jwks.json", "authtoken"},
		{"/api/site", "site"},
		{"/health", "site"},
		{"/buffer-stats", "site"},
	}
}
