// Command ingest serves the buffered ingest API (-role api), drains the buffer into the main
// database (-role worker), or both (-role all); `ingest admin ...` manages the dead letters.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/admin"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/httpapi"
	"github.com/obsops/obsops/services/ingest/postgres"
	"github.com/obsops/obsops/services/ingest/worker"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("ingest", run) }

func run(ctx context.Context) error {
	var cfg ingest.Config
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		if err := config.Load(&cfg); err != nil {
			return err
		}
		return admin.Run(ctx, &cfg, os.Args[2:], os.Stdout, os.Stderr)
	}
	role := flag.String("role", ingest.RoleAll, "api, worker or all")
	flag.Parse()
	if !ingest.ValidRole(*role) {
		return fmt.Errorf("-role: invalid value %q: must be one of api, worker, all", *role)
	}
	if err := config.Load(&cfg); err != nil {
		return err
	}
	// The server takes bodies up to the largest route limit; each route enforces its own
	// (OPS_BODY_LIMIT_BYTES, or OPS_INGEST_BULK_BODY_LIMIT_BYTES for the bulk registration).
	common := cfg.Common
	common.BodyLimitBytes = max(cfg.BodyLimitBytes, cfg.BulkBodyLimitBytes)
	svc, err := service.New(service.Options{
		Name: "ingest", Title: "obsops ingest", Addr: cfg.Addr, Common: common,
		Description: "Executed obs units, raw data files and raw data packages; critical writes are buffered.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	// The local database for reads and reference checks (at a secondary site its replica), the
	// main site's primary for the direct writes (finalize, file update): database.Pools.
	pools, err := database.AttachPools(svc, migrations.Latest())
	if err != nil {
		return err
	}
	db := pools.Read
	svc.Log = svc.Log.With("role", *role)
	buf := buffer.New(svc.Redis, cfg.RedisTimeout)
	if *role != ingest.RoleWorker {
		status := ingest.Committed
		if cfg.SiteType == "secondary" {
			status = ingest.Replicated
		}
		var direct *postgres.Applier
		if !cfg.BufferingEnabled {
			direct = &postgres.Applier{DB: pools.Write, BatchRows: 5000}
		}
		httpapi.Register(svc.API, &httpapi.Handlers{
			Direct: direct,
			Auth:   authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log),
			Buffer: buf, Store: &postgres.Store{DB: db, Write: pools.Write, Status: status},
			Site: cfg.SiteName, IdempotencyTTL: cfg.IdempotencyTTL, RetryAfter: cfg.RetryAfter,
			BodyLimit: int64(cfg.BodyLimitBytes), BulkBodyLimit: int64(cfg.BulkBodyLimitBytes),
			Metrics: httpapi.NewMetrics(svc.Metrics),
		})
	}
	if *role == ingest.RoleWorker && cfg.WorkerNice > 0 {
		// Not with -role all: the API shares the process.
		if err := worker.LowerPriority(cfg.WorkerNice); err != nil {
			return fmt.Errorf("OPS_INGEST_WORKER_NICE: %w", err)
		}
	}
	if *role != ingest.RoleAPI {
		// The worker's own pool on the main database, with I/O deadlines (a WAN that drops
		// traffic must not hang its connections).
		mainDB, err := postgres.OpenWorkerDB(cfg.MainDB(), cfg.DBMaxConns, 30*time.Second)
		if err != nil {
			return err
		}
		probe, err := worker.OpenProbe(cfg.MainDB())
		if err != nil {
			return err
		}
		h := &worker.Handler{
			Apply:  &postgres.Applier{DB: mainDB, BatchRows: 5000},
			Buffer: buf, Log: svc.Log, Metrics: worker.NewMetrics(svc.Metrics),
			Secondary: cfg.SiteType == "secondary", Probe: probe,
			Appliers: min(worker.DefaultAppliers, cfg.DBMaxConns),
		}
		hctx, stopHandler := context.WithCancel(context.Background())
		h.Start(hctx)
		srv := worker.New(svc.Redis, cfg.WorkerConcurrency, svc.Log, h)
		if err := srv.Start(h.Mux()); err != nil {
			stopHandler()
			return fmt.Errorf("start worker: %w", err)
		}
		svc.AddReadiness("worker", func(context.Context) error { return srv.Ping() })
		octx, stopOrphans := context.WithCancel(context.Background())
		go worker.WatchOrphans(octx, buf, 5*time.Second, svc.Log)
		svc.OnShutdown("orphan-watch", func(context.Context) error { stopOrphans(); return nil })
		if h.Secondary {
			// Release cached records once the local replica (OPS_DATABASE_URL) has the commit.
			wctx, stop := context.WithCancel(context.Background())
			go worker.WatchReplica(wctx, db.DB, buf, 100*time.Millisecond, svc.Log)
			svc.OnShutdown("replica-watch", func(context.Context) error { stop(); return nil })
		}
		svc.OnShutdown("worker", func(context.Context) error {
			stopHandler() // tasks waiting for the main database go back to the queue at once
			srv.Shutdown()
			_ = probe.Close()
			return mainDB.Close()
		})
	}
	return svc.Run(ctx)
}
