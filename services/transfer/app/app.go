// Package app builds the transfer service from its configuration: the stores, the planner with
// its wake-ups and sweep, the overview hub, the use cases and the HTTP handlers (New), and runs
// the background loops next to the server (App.Run). cmd/transfer and the tests
// (internal/transfertest) build it here, so they run the same wiring.
package app

import (
	"context"
	"log/slog"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/httpapi"
	"github.com/obsops/obsops/services/transfer/live"
	"github.com/obsops/obsops/services/transfer/planner"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// Parts are what the transfer service runs on: its database, Redis, log and metrics registry
// (nil: metrics not registered).
type Parts struct {
	DB      *sqlx.DB
	Redis   *redis.Client
	Log     *slog.Logger
	Metrics prometheus.Registerer
}

// Core is the transfer service without its HTTP server: the stores, the planner and its
// wake-ups, the reconciler, the overview hub and the use cases built on them.
type Core struct {
	Config     *transfer.Config
	Store      *postgres.Store
	Claimer    *postgres.Claimer   // serves concurrent agent claims together
	Completer  *postgres.Completer // completes concurrent agent completes together
	Reconciler *planner.Reconciler
	Planner    *planner.Planner
	Waker      *planner.Waker // asks the planner for a round after a complete or reset
	Hub        *live.Hub
	Service    *transfer.Service
}

// NewCore builds the transfer service's parts on p with cfg.
func NewCore(cfg *transfer.Config, p Parts) *Core {
	c := &Core{Config: cfg}
	c.Store = &postgres.Store{DB: p.DB, Lease: cfg.OperationLease, MaxRetries: cfg.MaxRetries, Retry: cfg.RetryPolicy()}
	c.Claimer = &postgres.Claimer{Store: c.Store}
	c.Completer = &postgres.Completer{Store: c.Store}
	c.Reconciler = &planner.Reconciler{Store: c.Store, Redis: p.Redis}
	c.Planner = planner.NewPlanner(p.DB, c.Store, p.Redis, c.Reconciler, cfg, p.Log, p.Metrics)
	c.Waker = planner.NewWaker(p.Redis)
	c.Service = &transfer.Service{Store: c.Store, Claimer: c.Claimer, Completer: c.Completer, Reconciler: c.Reconciler, Waker: c.Waker,
		Staging: transfer.StagingLimits{MaxPackages: cfg.StagingMaxPackages, MaxOpenJobs: cfg.StagingMaxOpenJobs}}
	c.Hub = live.NewHub(c.Service, p.Redis, p.Log, cfg.WSHeartbeat, cfg.WSMaxPerUser, p.Metrics)
	if p.Metrics != nil {
		p.Metrics.MustRegister(planner.NewMetrics(c.Store))
	}
	return c
}

// App is the transfer service on its chassis: the Core with its routes registered.
type App struct {
	*Core
	Handlers *httpapi.Handlers

	svc *service.Service
}

// New attaches the database to svc, builds the Core on it and registers every route.
func New(cfg *transfer.Config, svc *service.Service) (*App, error) {
	db, err := database.Attach(svc, migrations.Latest())
	if err != nil {
		return nil, err
	}
	core := NewCore(cfg, Parts{DB: db, Redis: svc.Redis, Log: svc.Log, Metrics: svc.Metrics})
	auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
	h := &httpapi.Handlers{Auth: auth, Service: core.Service, Hub: core.Hub}
	httpapi.Register(svc.API, svc.App, h)
	return &App{Core: core, Handlers: h, svc: svc}, nil
}

// Run starts the background loops (the planner with its reconcile sweep, the wake-ups, the
// overview hub), serves until ctx ends, and at shutdown, once the HTTP server has stopped,
// closes the overview WebSockets and stops the loops. The loops run on their own context, so
// they keep working while requests drain.
func (a *App) Run(ctx context.Context) error {
	a.svc.OnShutdown("overview websockets", a.Hub.CloseAll)
	return a.svc.RunWithLoops(ctx,
		service.Loop{Name: "planner", Run: func(ctx context.Context) error { a.Planner.Run(ctx); return nil }},
		service.Loop{Name: "wake-ups", Run: func(ctx context.Context) error { a.Waker.Run(ctx); return nil }},
		service.Loop{Name: "overview hub", Run: func(ctx context.Context) error { a.Hub.Run(ctx); return nil }})
}
