// Package app builds the authtoken service from its configuration: the token and user stores,
// the usage counter and flusher, the token cache, the token and user services (NewCore), then
// the signing keys, the authenticator, the login and the HTTP handlers on the chassis (New), and
// runs the background loops next to the server (App.Run). cmd/authtoken and the tests
// (internal/tokentest) build it here, so they run the same wiring.
package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/directory"
	"github.com/obsops/obsops/services/authtoken/httpapi"
	"github.com/obsops/obsops/services/authtoken/login"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/signing"
	"github.com/obsops/obsops/services/authtoken/tokencache"
	"github.com/obsops/obsops/services/authtoken/usage"
)

// Parts are what the authtoken service runs on: the database for reads (at a secondary site its
// replica) and for changes (the main site's primary; nil: Read), Redis, the log and the metrics
// registry (nil: metrics not registered).
type Parts struct {
	Read    *sqlx.DB
	Write   *sqlx.DB
	Redis   redis.UniversalClient
	Log     *slog.Logger
	Metrics prometheus.Registerer
}

// Core is the authtoken service without its HTTP server and signing keys: the stores, the usage
// counter, the token cache, and the token and user services and usage flusher built on them.
type Core struct {
	TokenStore *postgres.Tokens
	UserStore  *postgres.Users
	Counter    *usage.Counter
	Cache      *tokencache.Cache
	Tokens     *authtoken.TokenService
	Users      *authtoken.UserService
	Flusher    *usage.Flusher

	cfg     *authtoken.Config
	parts   Parts
	metrics *authtoken.TokenMetrics
}

// NewCore builds the authtoken service's parts on p with cfg. The token service checks users
// against the user directory, and the user service installs what it publishes in this process,
// only once New links them to the authenticator's copy; a Core alone publishes to Redis.
func NewCore(cfg *authtoken.Config, p Parts) *Core {
	c := &Core{
		TokenStore: &postgres.Tokens{DB: p.Read, Write: p.Write},
		UserStore:  &postgres.Users{DB: p.Read, Write: p.Write, Secondary: cfg != nil && cfg.Secondary()},
		Counter:    usage.NewCounter(p.Redis),
		Cache:      tokencache.New(p.Redis, recordTTL(cfg)),
		cfg:        cfg,
		parts:      p,
	}
	if p.Metrics != nil {
		c.metrics = authtoken.NewTokenMetrics(p.Metrics)
	}
	c.Users = c.NewUserService()
	c.Tokens = c.NewTokenService()
	c.Flusher = c.NewFlusher()
	return c
}

// recordTTL is how long token records are cached in Redis: at a secondary site a revocation made
// at the main reaches only the replica, so records are read again every
// contract.SecondaryTokenRecordTTL; at the main every change invalidates them at once.
func recordTTL(cfg *authtoken.Config) time.Duration {
	if cfg != nil && cfg.Secondary() {
		return contract.SecondaryTokenRecordTTL
	}
	return tokencache.DefaultTTL
}

// NewUserService builds a user service on the core's store and cache, as the server runs it
// (tests build more than one, as replicas of the service would be).
func (c *Core) NewUserService() *authtoken.UserService {
	return &authtoken.UserService{Store: c.UserStore, Cache: c.Cache, Log: c.parts.Log,
		Directory: &directory.Publisher{Redis: c.parts.Redis}}
}

// NewTokenService builds a token service on the core's store, counter and cache, creating
// service accounts through the core's user service, as the server runs it.
func (c *Core) NewTokenService() *authtoken.TokenService {
	return &authtoken.TokenService{
		Store: c.TokenStore, Accounts: c.Users, Limits: c.cfg.TokenLimits(),
		Counter: c.Counter, Cache: c.Cache, Log: c.parts.Log, Metrics: c.metrics,
	}
}

// NewFlusher builds a usage flusher from the core's counter into its token store, every
// OPS_TOKEN_USAGE_FLUSH_INTERVAL once started (tests call Flush themselves).
func (c *Core) NewFlusher() *usage.Flusher {
	return usage.NewFlusher(c.Counter, c.TokenStore, c.cfg.TokenUsageFlush, c.parts.Log, c.parts.Metrics)
}

// App is the authtoken service on its chassis: the Core with the signing keys, the
// authenticator, the login and every route registered.
type App struct {
	*Core
	Auth *authn.Authenticator

	svc *service.Service
}

// New attaches the databases to svc, builds the Core on them, links it to the authenticator's
// user directory and registers every route.
func New(cfg *authtoken.Config, svc *service.Service) (*App, error) {
	ring, err := signing.NewKeyRing(cfg.JWTSigningKey, cfg.JWTPreviousKeys)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_JWT_SIGNING_KEY", Reason: err.Error()}
	}
	if cfg.Secondary() { // its own key signs; the main's public keys verify the main's JWTs
		if err := ring.TrustMainKeys(cfg.JWTMainPublicKeys); err != nil {
			return nil, &config.Invalid{Var: "OPS_JWT_MAIN_PUBLIC_KEYS", Reason: err.Error()}
		}
	}
	// Reads (verification included) from the local database, which at a secondary site is its
	// replica; changes in the main site's database, which a secondary does not connect to: there
	// every change is refused (409 write_at_main_site, decisions §45).
	pools, err := database.AttachLocalPools(svc, migrations.Latest())
	if err != nil {
		return nil, err
	}
	core := NewCore(cfg, Parts{Read: pools.Read, Write: pools.Write, Redis: svc.Redis, Log: svc.Log, Metrics: svc.Metrics})
	auth := authn.New(cfg.Config, ring.Keys(), core.Tokens, svc.Redis, svc.Log)
	core.Users.Directory = &directory.Publisher{Redis: svc.Redis, Local: auth.JWT.Users}
	core.Tokens.Directory = auth.JWT.Users
	issuer := &signing.Issuer{Ring: ring, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, TTL: cfg.JWTTTL, Site: cfg.SiteName}
	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth:          auth,
		Users:         core.Users,
		Keys:          ring,
		Tokens:        core.Tokens,
		Login:         login.New(cfg, svc.Redis, core.Users, issuer, svc.Log),
		UIRedirectURL: cfg.UIRedirectURL,
	})
	return &App{Core: core, Auth: auth, svc: svc}, nil
}

// Run starts the background work — the usage flusher (which first finishes any flush a previous
// process left behind) and the user directory sync (at start, then every
// authn.DirectorySyncInterval) — serves until ctx ends, and at shutdown, once the HTTP server
// has stopped, flushes the last counted uses and stops the sync, before the databases close.
//
// At a secondary site there is no flusher: it would write the main, which the site does not
// (decisions §45). Uses counted there stay in its Redis (GET /api/tokens/{id}/usage there adds them).
func (a *App) Run(ctx context.Context) error {
	if !a.cfg.Secondary() {
		a.Flusher.Start()
		a.svc.OnShutdown("token usage flush", a.Flusher.Stop)
	}
	return a.svc.RunWithLoops(ctx,
		service.Loop{Name: "user directory sync", Run: func(ctx context.Context) error { a.Users.RunSync(ctx); return nil }})
}
