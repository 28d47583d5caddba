// Command authtoken serves identity and API tokens; `authtoken admin ...` bootstraps a fresh
// install from the command line (see `authtoken admin` for the commands).
package main

import (
	"context"
	"os"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/admin"
	"github.com/obsops/obsops/services/authtoken/directory"
	"github.com/obsops/obsops/services/authtoken/httpapi"
	"github.com/obsops/obsops/services/authtoken/login"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/signing"
	"github.com/obsops/obsops/services/authtoken/tokencache"
	"github.com/obsops/obsops/services/authtoken/usage"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("authtoken", run) }

func run(ctx context.Context) error {
	var cfg authtoken.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		return admin.Run(ctx, &admin.Env{Config: &cfg, Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[2:])
	}

	ring, err := signing.NewKeyRing(cfg.JWTSigningKey, cfg.JWTPreviousKeys)
	if err != nil {
		return &config.Invalid{Var: "OPS_JWT_SIGNING_KEY", Reason: err.Error()}
	}
	svc, err := service.New(service.Options{
		Name: "authtoken", Title: "obsops identity and API tokens", Addr: cfg.Addr, Common: cfg.Common,
		Description: "Identity-provider login, session JWTs and API tokens.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	// Reads (verification included) from the local database, which at a secondary site is its
	// replica; changes to the main site's primary (database.Pools).
	pools, err := database.AttachPools(svc, migrations.Latest())
	if err != nil {
		return err
	}
	tokenStore := &postgres.Tokens{DB: pools.Read, Write: pools.Write}
	usageCounter := usage.NewCounter(svc.Redis)
	cache := tokencache.New(svc.Redis, tokencache.DefaultTTL)
	tokens := &authtoken.TokenService{
		Store: tokenStore, Limits: cfg.TokenLimits(),
		Counter: usageCounter, Cache: cache,
		Log: svc.Log, Metrics: authtoken.NewTokenMetrics(svc.Metrics),
	}
	auth := authn.New(cfg.Config, ring.Keys(), tokens, svc.Redis, svc.Log)
	users := &authtoken.UserService{
		Store: &postgres.Users{DB: pools.Read, Write: pools.Write}, Cache: cache, Log: svc.Log,
		Directory: &directory.Publisher{Redis: svc.Redis, Local: auth.JWT.Users},
	}
	tokens.Accounts, tokens.Directory = users, auth.JWT.Users
	go users.RunSync(ctx) // the user directory: at start, then every authn.DirectorySyncInterval
	usageFlusher := usage.NewFlusher(usageCounter, tokenStore, cfg.TokenUsageFlush, svc.Log, svc.Metrics)
	usageFlusher.Start() // first finishes any flush a previous process left behind
	svc.OnShutdown("token usage flush", usageFlusher.Stop)
	issuer := &signing.Issuer{Ring: ring, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, TTL: cfg.JWTTTL}

	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth:          auth,
		Users:         users,
		Keys:          ring,
		Tokens:        tokens,
		Login:         login.New(&cfg, svc.Redis, users, issuer, svc.Log),
		UIRedirectURL: cfg.UIRedirectURL,
	})
	return svc.Run(ctx)
}
