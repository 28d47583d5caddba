// Command catalog serves observing programs, sources, name resolution and instruments;
// `catalog admin seed-demo` loads a small real catalogue for a new installation.
package main

import (
	"context"
	"os"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/admin"
	"github.com/obsops/obsops/services/catalog/httpapi"
	"github.com/obsops/obsops/services/catalog/postgres"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/visibility"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("catalog", run) }

func run(ctx context.Context) error {
	var cfg catalog.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		return admin.Run(ctx, &cfg, os.Stdout, os.Args[2:])
	}
	var vcfg visibility.Config
	if err := config.Load(&vcfg); err != nil {
		return err
	}
	svc, err := service.New(service.Options{
		Name: "catalog", Title: "obsops catalog", Addr: cfg.Addr, Common: cfg.Common,
		Description: "Observing programs, sources, name resolution, instruments and visibility.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	// Reads from the local database (at a secondary site its replica), changes to the main
	// site's primary (database.Pools).
	pools, err := database.AttachPools(svc, migrations.Latest())
	if err != nil {
		return err
	}
	local, err := resolve.NewLocal()
	if err != nil {
		return err
	}
	coneDSN, err := postgres.ConeDSN(svc.Common.DatabaseURL)
	if err != nil {
		return &config.Invalid{Var: "OPS_DATABASE_URL", Reason: err.Error()}
	}
	cone, err := database.Open(coneDSN, svc.Common.DBMaxConns)
	if err != nil {
		return err
	}
	svc.OnClose("database (cone search)", func(context.Context) error { return cone.Close() })
	store := &postgres.Store{DB: pools.Read, Write: pools.Write, Cone: cone}
	resolver := &resolve.Resolver{Local: local, DB: store}
	if cfg.SesameURL != "" {
		resolver.Online = resolve.NewSesame(cfg.SesameURL, cfg.SesameTimeout, cfg.SesameCacheTTL, svc.Redis, svc.Log, svc.Metrics)
	}
	auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
	site := &visibility.Site{Site: cfg.Site}
	vis, err := visibilityRoutes(svc, pools, &vcfg, site)
	if err != nil {
		return err
	}
	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth: auth, Store: store, Resolver: resolver, Log: svc.Log, Visibility: vis,
		Site: site,
	})
	return svc.Run(ctx)
}
