// Package authtoken is the identity service of obsops: users and their roles, login through the
// identity provider, the service's own session JWTs (and their JWKS), and API tokens — whose
// table, verification and usage counters it alone owns.
package authtoken

import (
	"net/url"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
)

// Config is the authtoken service's configuration (server and admin commands alike).
type Config struct {
	config.Common
	authn.Config
	Addr string `env:"OPS_AUTHTOKEN_ADDR" envDefault:"127.0.0.1:8081"`

	// Session JWTs. The signing key is an Ed25519 private key in PEM (PKCS#8); give it as
	// OPS_JWT_SIGNING_KEY_FILE (a path, e.g. a mounted secret) or OPS_JWT_SIGNING_KEY (the PEM).
	// OPS_JWT_PREVIOUS_KEYS holds earlier keys (PEM, public or private, concatenated) that are
	// still published and accepted, so rotating the signing key logs nobody out.
	JWTSigningKey   string `env:"OPS_JWT_SIGNING_KEY"`
	JWTPreviousKeys string `env:"OPS_JWT_PREVIOUS_KEYS"`
	// JWTMainPublicKeys, at a secondary site only (and required there), are the main site's public
	// keys (PEM, `authtoken admin export-public-keys` at the main): published in this site's JWKS
	// and accepted, so the main's JWTs verify here. The secondary signs with its own
	// OPS_JWT_SIGNING_KEY and never holds the main's private key (docs/two-sites.md).
	JWTMainPublicKeys string        `env:"OPS_JWT_MAIN_PUBLIC_KEYS"`
	JWTTTL            time.Duration `env:"OPS_JWT_TTL" envDefault:"8h"`
	// BootstrapAdmins are usernames made admin when a login through the identity provider creates
	// their account (every new account gets viewer); a later login never grants a role again, so
	// an admin can demote a bootstrap admin for good.
	BootstrapAdmins []string `env:"OPS_BOOTSTRAP_ADMINS" envSeparator:","`
	// LoginDefaultRole is the role an account created by a login gets (viewer or observer):
	// viewer by default, so a new astronomer reads everything but writes nothing until an admin
	// or this setting says otherwise (docs/configuration.md, decisions §33).
	LoginDefaultRole string `env:"OPS_LOGIN_DEFAULT_ROLE" envDefault:"viewer"`

	// Login through the identity provider (OIDC authorization code + PKCE).
	OIDCIssuer       string   `env:"OPS_OIDC_ISSUER"`
	OIDCClientID     string   `env:"OPS_OIDC_CLIENT_ID"`
	OIDCClientSecret string   `env:"OPS_OIDC_CLIENT_SECRET"`
	OIDCRedirectURL  string   `env:"OPS_OIDC_REDIRECT_URL" envDefault:"http://127.0.0.1:8080/idp/callback"`
	OIDCScopes       []string `env:"OPS_OIDC_SCOPES" envSeparator:"," envDefault:"openid,profile,email"`
	// UIRedirectURL, when set, is where /idp/callback sends the browser (JWT in the URL fragment)
	// instead of answering JSON.
	UIRedirectURL string `env:"OPS_UI_REDIRECT_URL"`

	// API tokens.
	TokenDefaultDays int           `env:"OPS_TOKEN_DEFAULT_DAYS" envDefault:"90"`
	TokenUsageFlush  time.Duration `env:"OPS_TOKEN_USAGE_FLUSH_INTERVAL" envDefault:"1s"`
	MaxTokensPerUser int           `env:"OPS_TOKEN_MAX_PER_USER" envDefault:"100"`
}

// MaxTokenDays is the longest lifetime an API token can be given.
const MaxTokenDays = 365

// Validate checks the authtoken settings.
func (c *Config) Validate() error {
	switch {
	case c.JWTTTL < time.Minute || c.JWTTTL > 7*24*time.Hour:
		return &config.Invalid{Var: "OPS_JWT_TTL", Reason: "must be within [1m, 168h]"}
	case c.TokenDefaultDays < 1 || c.TokenDefaultDays > MaxTokenDays:
		return &config.Invalid{Var: "OPS_TOKEN_DEFAULT_DAYS", Reason: "must be within [1, 365]"}
	case c.TokenUsageFlush < 10*time.Millisecond || c.TokenUsageFlush > 5*time.Second:
		return &config.Invalid{Var: "OPS_TOKEN_USAGE_FLUSH_INTERVAL", Reason: "must be within [10ms, 5s] (usage counts must be exact within 5 s)"}
	case c.MaxTokensPerUser < 1:
		return &config.Invalid{Var: "OPS_TOKEN_MAX_PER_USER", Reason: "must be at least 1"}
	case c.LoginDefaultRole != authn.RoleViewer && c.LoginDefaultRole != authn.RoleObserver:
		return &config.Invalid{Var: "OPS_LOGIN_DEFAULT_ROLE", Reason: "must be viewer or observer (admin is granted by OPS_BOOTSTRAP_ADMINS or an admin only)"}
	}
	switch {
	case c.Secondary() && c.JWTMainPublicKeys == "":
		return &config.Invalid{Var: "OPS_JWT_MAIN_PUBLIC_KEYS", Reason: "required at a secondary site: the main site's public JWT keys (authtoken admin export-public-keys at the main)"}
	case !c.Secondary() && c.JWTMainPublicKeys != "":
		return &config.Invalid{Var: "OPS_JWT_MAIN_PUBLIC_KEYS", Reason: "only a secondary site accepts the main site's keys; the main site publishes its own keys only"}
	}
	if c.OIDCIssuer != "" {
		if err := config.URL("OPS_OIDC_ISSUER", c.OIDCIssuer, "http", "https"); err != nil {
			return err
		}
		if c.OIDCClientID == "" {
			return &config.Invalid{Var: "OPS_OIDC_CLIENT_ID", Reason: "required when OPS_OIDC_ISSUER is set"}
		}
		if err := config.URL("OPS_OIDC_REDIRECT_URL", c.OIDCRedirectURL, "http", "https"); err != nil {
			return err
		}
	}
	if c.UIRedirectURL != "" {
		if _, err := url.Parse(c.UIRedirectURL); err != nil {
			return &config.Invalid{Var: "OPS_UI_REDIRECT_URL", Reason: "not a URL"}
		}
	}
	return nil
}
