// Command transfer serves the transfer service: the operations pipeline, its planner, the
// movers' agent API, resets, reconcile and the live overview.
package main

import (
	"context"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/engine"
	"github.com/obsops/obsops/services/transfer/httpapi"
	"github.com/obsops/obsops/services/transfer/live"
	"github.com/obsops/obsops/services/transfer/postgres"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("transfer", run) }

func run(ctx context.Context) error {
	var cfg transfer.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if cfg.Secondary() { // its planner, leases and movers write all the time: see README, Services at a secondary site
		return &config.Invalid{Var: "OPS_SITE_TYPE", Reason: "transfer runs at the main site only; do not start it at a secondary site"}
	}
	svc, err := service.New(service.Options{
		Name: "transfer", Title: "obsops transfer", Addr: cfg.Addr, Common: cfg.Common,
		Description: "Data transfer, unpacking, archiving and staging operations.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	db, err := database.Attach(svc, migrations.Latest())
	if err != nil {
		return err
	}
	auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
	store := &postgres.Store{DB: db, Lease: cfg.OperationLease, MaxRetries: cfg.MaxRetries, Backoff: cfg.RetryBackoff, BackoffMax: cfg.RetryBackoffMax}
	reconciler := &engine.Reconciler{Store: store, Redis: svc.Redis}
	hub := live.NewHub(store, svc.Redis, svc.Log, cfg.WSHeartbeat, cfg.WSMaxPerUser, svc.Metrics)
	planner := engine.NewPlanner(db, store, svc.Redis, reconciler, &cfg, svc.Log, svc.Metrics)
	waker := engine.NewWaker(svc.Redis)

	bg, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { planner.Run(bg); done <- struct{}{} }()
	go func() { hub.Run(bg); done <- struct{}{} }()
	go func() { waker.Run(bg); done <- struct{}{} }()
	svc.OnShutdown("overview websockets", hub.CloseAll)
	svc.OnShutdown("planner", func(ctx context.Context) error {
		stop()
		for range 3 {
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})

	httpapi.Register(svc.API, svc.App, &httpapi.Handlers{
		Auth: auth, Store: store, Claimer: &postgres.Claimer{Store: store}, Completer: &postgres.Completer{Store: store}, Reconciler: reconciler, Waker: waker, Hub: hub, Log: svc.Log,
	})
	return svc.Run(ctx)
}
