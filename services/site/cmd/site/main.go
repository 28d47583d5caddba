// Command site serves public site information, suite health and buffer statistics.
package main

import (
	"context"
	"net/http"
	"time"

	"github.com/hibiken/asynq"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/site"
	"github.com/obsops/obsops/services/site/httpapi"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("site", run) }

func run(ctx context.Context) error {
	var cfg site.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	svc, err := service.New(service.Options{
		Name: "site", Title: "obsops site", Addr: cfg.Addr, Common: cfg.Common,
		Build: service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	// The local database (at a secondary site its replica) and the main site's, whose
	// reachability the main link probes.
	pools, err := database.AttachPools(svc, migrations.Latest())
	if err != nil {
		return err
	}
	inspector := asynq.NewInspectorFromRedisClient(svc.Redis)
	monitor := &site.Monitor{
		Secondary: cfg.Secondary(), Main: pools.Main, Local: pools.Read, MainDB: pools.Write, Log: svc.Log,
		Buffers: &site.BufferInspector{Inspector: inspector, Redis: svc.Redis, Site: cfg.SiteName, SiteType: cfg.SiteType},
	}
	monitor.Register(svc.Metrics)
	mctx, stopMonitor := context.WithCancel(context.Background())
	go monitor.Run(mctx)
	svc.OnShutdown("monitor", func(context.Context) error { stopMonitor(); return nil })
	services := cfg.Upstreams.ByService()
	delete(services, "site")
	if cfg.Secondary() {
		delete(services, "transfer") // runs at the main site only
	}
	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth: authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log),
		Info: site.NewInfo(&cfg, version, commit),
		Health: &site.Checker{
			Site:       cfg.SiteName,
			Database:   pools.Read.PingContext,
			Redis:      func(ctx context.Context) error { return svc.Redis.Ping(ctx).Err() },
			Services:   services,
			HTTP:       &http.Client{Timeout: 3 * time.Second},
			PerTimeout: 2 * time.Second,
			CacheFor:   time.Second,
			Log:        svc.Log,
			Up:         site.NewComponentGauge(svc.Metrics),
			Monitor:    monitor,
			Secondary:  cfg.Secondary(),
		},
		Monitor: monitor,
	})

	return svc.Run(ctx)
}
