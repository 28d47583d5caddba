// Package app builds the site service from its configuration — the link monitor, the health
// checker and the HTTP handlers on the chassis (New) — and runs the monitor next to the server
// (App.Run). cmd/site builds it here.
package app

import (
	"context"
	"net/http"
	"time"

	"github.com/hibiken/asynq"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/site"
	"github.com/obsops/obsops/services/site/httpapi"
)

// App is the site service on its chassis: its monitor and every route registered.
type App struct {
	Monitor *site.Monitor
	Weather *weather.Store
	// Observatory polls the observatory's /buffer-stats (main site, OPS_OBSERVATORY_STATUS_URL);
	// nil when none is configured.
	Observatory *site.Observatory

	cfg *site.Config
	svc *service.Service
}

// New attaches the database to svc — the local one (at a secondary site its replica, and the main
// seen through ingest's report) — builds the monitor and the health checker
// and registers every route. version and commit are the build's, for /api/site/info.
func New(cfg *site.Config, svc *service.Service, version, commit string) (*App, error) {
	// At a secondary site no connection to the main (decisions §45): it sees the main through
	// ingest's report, and its writes (the PWV series) answer 409 write_at_main_site.
	pools, err := database.AttachLocalPools(svc, migrations.Latest())
	if err != nil {
		return nil, err
	}
	inspector := asynq.NewInspectorFromRedisClient(svc.Redis)
	monitor := &site.Monitor{
		Secondary: cfg.Secondary(), Main: pools.Main, Local: pools.Read, Log: svc.Log,
		MainReports: func(ctx context.Context) (database.MainReport, bool, error) {
			return database.ReadMainReport(ctx, svc.Redis)
		},
		TokenCacheTTL: cfg.TokenCacheTTL,
		Buffers:       &site.BufferInspector{Inspector: inspector, Redis: svc.Redis, Site: cfg.SiteName, SiteType: cfg.SiteType},
	}
	monitor.Register(svc.Metrics)
	store := &weather.Store{Read: pools.Read, Write: pools.Write}
	var observatory *site.Observatory
	if cfg.ObservatoryStatusURL != "" {
		observatory = site.NewObservatory(cfg.ObservatoryStatusURL, svc.Log)
	}
	services := cfg.Upstreams.ByService()
	delete(services, "site")
	if cfg.Secondary() {
		delete(services, "transfer") // runs at the main site only
	}
	httpapi.Register(svc.API, &httpapi.Handlers{
		Auth: authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log),
		Info: site.NewInfo(cfg, version, commit),
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
		Monitor:     monitor,
		Weather:     store,
		Observatory: observatory,
	})
	return &App{Monitor: monitor, Weather: store, Observatory: observatory, cfg: cfg, svc: svc}, nil
}

// Run starts the monitor (the main link, replica lag and buffer probes) and, at the main site,
// the weather pruning loop and the observatory's poll (when configured), serves until ctx ends, and stops them at shutdown once the HTTP
// server has stopped.
func (a *App) Run(ctx context.Context) error {
	loops := []service.Loop{{Name: "monitor", Run: func(ctx context.Context) error { a.Monitor.Run(ctx); return nil }}}
	if !a.cfg.Secondary() { // a secondary's database is a replica of the main's, pruned there
		loops = append(loops, service.Loop{Name: "weather-prune", Run: a.pruneWeather})
	}
	if a.Observatory != nil {
		loops = append(loops, service.Loop{Name: "observatory", Run: func(ctx context.Context) error { a.Observatory.Run(ctx); return nil }})
	}
	return a.svc.RunWithLoops(ctx, loops...)
}

// pruneWeather deletes readings older than OPS_WEATHER_RETENTION_DAYS every
// OPS_WEATHER_PRUNE_INTERVAL, 5,000 rows per transaction.
func (a *App) pruneWeather(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.WeatherPruneInterval)
	defer tick.Stop()
	for {
		cutoff := time.Now().Add(-time.Duration(a.cfg.WeatherRetentionDays) * 24 * time.Hour)
		if n, err := a.Weather.Prune(ctx, cutoff, 5000); err != nil {
			a.svc.Log.Warn("weather pruning failed; next attempt at the next interval", "err", err)
		} else if n > 0 {
			a.svc.Log.Info("weather readings pruned", "deleted", n, "before", cutoff.UTC().Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
