package authn

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/config"
)

// Config holds the settings every service needs to check credentials; services embed it.
type Config struct {
	JWTIssuer     string        `env:"OPS_JWT_ISSUER" envDefault:"obsops"`
	JWTAudience   string        `env:"OPS_JWT_AUDIENCE" envDefault:"obsops"`
	JWTLeeway     time.Duration `env:"OPS_JWT_LEEWAY" envDefault:"30s"`
	FailureLimit  int           `env:"OPS_AUTH_FAILURE_LIMIT" envDefault:"100"`
	FailureWindow time.Duration `env:"OPS_AUTH_FAILURE_WINDOW" envDefault:"1m"`
}

// Validate checks the authentication settings.
func (c *Config) Validate() error {
	switch {
	case c.JWTIssuer == "":
		return &config.Invalid{Var: "OPS_JWT_ISSUER", Reason: "must not be empty"}
	case c.JWTAudience == "":
		return &config.Invalid{Var: "OPS_JWT_AUDIENCE", Reason: "must not be empty"}
	case c.JWTLeeway < 0 || c.JWTLeeway > 5*time.Minute:
		return &config.Invalid{Var: "OPS_JWT_LEEWAY", Reason: "must be within [0s, 5m]"}
	case c.FailureLimit < 0:
		return &config.Invalid{Var: "OPS_AUTH_FAILURE_LIMIT", Reason: "must be >= 0 (0 disables)"}
	case c.FailureWindow <= 0:
		return &config.Invalid{Var: "OPS_AUTH_FAILURE_WINDOW", Reason: "must be positive"}
	}
	return nil
}

// NewRemote builds the Authenticator of a service other than authtoken: JWTs are verified
// locally against authtoken's JWKS, API tokens at authtoken, to which the service proves itself
// with internalSecret (OPS_INTERNAL_SECRET).
func NewRemote(c Config, authtokenURL, internalSecret string, rdb redis.UniversalClient, log *slog.Logger) *Authenticator {
	return New(c, NewJWKSCache(authtokenURL+"/.well-known/jwks.json"), NewRemoteTokens(authtokenURL, internalSecret), rdb, log)
}

// New builds an Authenticator from its parts (authtoken passes its own keys and verifier).
// With Redis, session JWTs are also checked against the user directory (revocation.go).
func New(c Config, keys KeySource, tokens TokenVerifier, rdb redis.UniversalClient, log *slog.Logger) *Authenticator {
	var directory *Directory
	if rdb != nil {
		directory = NewDirectory(rdb, log)
	}
	return &Authenticator{
		JWT:           &JWTVerifier{Keys: keys, Issuer: c.JWTIssuer, Audience: c.JWTAudience, Leeway: c.JWTLeeway, Users: directory},
		Tokens:        tokens,
		Redis:         rdb,
		FailureLimit:  c.FailureLimit,
		FailureWindow: c.FailureWindow,
		Log:           log,
	}
}
