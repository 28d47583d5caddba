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
	// TokenCacheTTL is how long a service other than authtoken reuses a successful API token
	// verification (CachedTokens); 0 verifies every request at authtoken.
	TokenCacheTTL time.Duration `env:"OPS_TOKEN_CACHE_TTL" envDefault:"1s"`
	// TokenVerifyTimeout bounds the verification of one API token (the token cache's Redis
	// round trips, the call to authtoken, authtoken's own Redis and PostgreSQL work): beyond it
	// the request is answered 503 with Retry-After, so a hung Redis costs a client this long, not
	// the seconds of every timeout along the way.
	TokenVerifyTimeout time.Duration `env:"OPS_TOKEN_VERIFY_TIMEOUT" envDefault:"1s"`
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
	case c.TokenCacheTTL < 0 || c.TokenCacheTTL > MaxTokenCacheTTL:
		return &config.Invalid{Var: "OPS_TOKEN_CACHE_TTL", Reason: "must be within [0s, 1s]"}
	case c.TokenVerifyTimeout < 10*time.Millisecond || c.TokenVerifyTimeout > 30*time.Second:
		return &config.Invalid{Var: "OPS_TOKEN_VERIFY_TIMEOUT", Reason: "must be within [10ms, 30s]"}
	}
	return nil
}

// NewRemote builds the Authenticator of a service other than authtoken: JWTs are verified
// locally against authtoken's JWKS, API tokens at authtoken, to which the service proves itself
// with internalSecret (OPS_INTERNAL_SECRET). With Redis and a TokenCacheTTL, verified tokens are
// reused in process for that long (CachedTokens).
func NewRemote(c Config, authtokenURL, internalSecret string, rdb redis.UniversalClient, log *slog.Logger) *Authenticator {
	var tokens TokenVerifier = NewRemoteTokens(authtokenURL, internalSecret)
	cached := rdb != nil && c.TokenCacheTTL > 0
	if cached {
		tokens = &CachedTokens{Next: tokens, Redis: rdb, TTL: c.TokenCacheTTL, Log: log}
	}
	a := New(c, NewJWKSCache(authtokenURL+"/.well-known/jwks.json"), tokens, rdb, log)
	if cached {
		tokens.(*CachedTokens).Users = a.JWT.Users
	}
	return a
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
		VerifyTimeout: c.TokenVerifyTimeout,
		Log:           log,
	}
}
