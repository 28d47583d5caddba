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
	db, err := database.Attach(svc, migrations.Latest())
	if err != nil {
		return err
	}
	inspector := asynq.NewInspectorFromRedisClient(svc.Redis)
	buffers := &site.BufferInspector{Inspector: inspector, Redis: svc.Redis, Site: cfg.SiteName, SiteType: cfg.SiteType, MainDB: db.PingContext}
	services := cfg.Upstreams.ByService()
	delete(services, "site")
	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth: authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log),
		Info: site.NewInfo(&cfg, version, commit),
		Health: &site.Checker{
			Site:       cfg.SiteName,
			Database:   db.PingContext,
			Redis:      func(ctx context.Context) error { return svc.Redis.Ping(ctx).Err() },
			Services:   services,
			HTTP:       &http.Client{Timeout: 3 * time.Second},
			PerTimeout: 2 * time.Second,
			CacheFor:   time.Second,
			Log:        svc.Log,
			Up:         site.NewComponentGauge(svc.Metrics),
			Buffer:     buffers.Stats,
		},
		Buffers: buffers,
	})

	return svc.Run(ctx)
}
