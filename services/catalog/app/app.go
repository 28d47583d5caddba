// Package app builds the catalog service from its configuration and the chassis: the stores,
// the name resolvers, the visibility engine's site and heatmap service, the use cases
// (catalog.Service) and their routes, and runs it with its background loops. The catalog
// command and anything else that needs the whole service use New and Run.
package app

import (
	"context"
	"runtime"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/httpapi"
	"github.com/obsops/obsops/services/catalog/ingestclient"
	"github.com/obsops/obsops/services/catalog/postgres"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// App is the catalog service, built and with its routes registered on the chassis.
type App struct {
	// Catalog is the use cases the routes call.
	Catalog *catalog.Service
	svc     *service.Service
	loops   []service.Loop
}

// New builds the catalog from its configuration (cfg, and vcfg for the heatmaps) on the chassis
// svc: reads go to the local database (at a secondary site its replica), changes to the main
// site's primary, refused at a secondary site (database.AttachLocalPools); cone searches have a
// pool of their own.
func New(cfg *catalog.Config, vcfg *visibility.Config, svc *service.Service) (*App, error) {
	// At a secondary site no connection to the main: every change there is refused (409
	// write_at_main_site, decisions §45).
	pools, err := database.AttachLocalPools(svc, migrations.Latest())
	if err != nil {
		return nil, err
	}
	local, err := resolve.NewLocal()
	if err != nil {
		return nil, err
	}
	coneDSN, err := postgres.ConeDSN(svc.Common.DatabaseURL)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_DATABASE_URL", Reason: err.Error()}
	}
	cone, err := database.Open(coneDSN, svc.Common.DBMaxConns)
	if err != nil {
		return nil, err
	}
	svc.OnClose("database (cone search)", func(context.Context) error { return cone.Close() })
	store := &postgres.Store{DB: pools.Read, Write: pools.Write, Cone: cone}
	resolver := &resolve.Resolver{Local: local, DB: store}
	if cfg.SesameURL != "" {
		resolver.Online = resolve.NewSesame(cfg.SesameURL, cfg.SesameTimeout, cfg.SesameCacheTTL, svc.Redis, svc.Log, svc.Metrics)
	}
	site := &visibility.Site{Site: cfg.Site}
	heatmaps := precalc.New(store, site, svc.Redis, *vcfg, svc.Log, svc.Metrics)
	ingests := ingestclient.NewSites(cfg.InternalSecret, append([]string{cfg.IngestURL}, cfg.FenceIngestURLs...)...)
	a := &App{svc: svc, Catalog: &catalog.Service{Store: store, Resolver: resolver, Site: site, Heatmaps: heatmaps, Log: svc.Log,
		Weather:    &weather.Store{Read: pools.Read}, // the site service's series, read only (grants/catalog.sql)
		Executions: ingests, Pending: ingests}}
	if vcfg.Worker {
		// The precalculation worker (asynq queue "visibility") in this process.
		a.loops = append(a.loops, service.Loop{Name: "visibility worker", Run: func(ctx context.Context) error {
			srv, mux := precalc.NewWorker(svc.Redis, heatmaps)
			if err := srv.Start(mux); err != nil {
				return err
			}
			<-ctx.Done()
			srv.Shutdown()
			return nil
		}})
	}
	auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
	perReplica := cfg.CostlyPerReplica
	if perReplica == 0 {
		perReplica = max(1, runtime.GOMAXPROCS(0)/2)
	}
	httpapi.Register(svc.API, &httpapi.Handlers{Auth: auth, Catalog: a.Catalog,
		Costs:     httpapi.NewCostBound(cfg.CostlyPerUser, perReplica),
		BodyLimit: int64(cfg.BodyLimitBytes), ImportBodyLimit: int64(cfg.ImportBodyLimitBytes)})
	return a, nil
}

// Run serves until ctx is cancelled with the background loops beside it (service.RunWithLoops):
// they stop when the server shuts down (before the database pools close) or when one of them
// fails, which also stops the server.
func (a *App) Run(ctx context.Context) error { return a.svc.RunWithLoops(ctx, a.loops...) }
