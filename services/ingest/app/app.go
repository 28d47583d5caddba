// Package app builds a running ingest process from its configuration and the service chassis:
// the stores, the buffer, the use cases (ingest.Service), the HTTP handlers and the worker, for
// the role the process takes (-role api, worker or all). Command ingest and the tests that need
// the wiring use it, so there is one.
package app

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/admin"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/httpapi"
	"github.com/obsops/obsops/services/ingest/postgres"
	"github.com/obsops/obsops/services/ingest/worker"
)

// App is one ingest process: the chassis with its routes registered and the background loops
// of its role, started and stopped by Run.
type App struct {
	svc   *service.Service
	loops []service.Loop
}

// Options returns the chassis options of an ingest process: the server takes bodies up to the
// largest route limit; each route enforces its own (OPS_BODY_LIMIT_BYTES, or
// OPS_INGEST_BULK_BODY_LIMIT_BYTES for the bulk registration).
func Options(cfg *ingest.Config, build service.Build) service.Options {
	common := cfg.Common
	common.BodyLimitBytes = max(cfg.BodyLimitBytes, cfg.BulkBodyLimitBytes)
	return service.Options{
		Name: "ingest", Title: "obsops ingest", Addr: cfg.Addr, Common: common,
		Description: "Executed obs units, raw data files and raw data packages; critical writes are buffered.",
		Build:       build,
	}
}

// ErrRole is the error of a -role value that is none of the roles.
func ErrRole(role string) error {
	return fmt.Errorf("-role: invalid value %q: must be one of api, worker, all", role)
}

// New wires an ingest process of role (ingest.RoleAPI, RoleWorker or RoleAll) on svc: the
// database pools (attached to svc), the buffer, and for the API the use cases and their routes,
// for the worker the asynq server with its handler and the watches it needs.
func New(svc *service.Service, cfg *ingest.Config, role string) (*App, error) {
	if !ingest.ValidRole(role) {
		return nil, ErrRole(role)
	}
	// The local database for reads and reference checks (at a secondary site its replica), the
	// main site's primary for the direct writes (finalize, file update): database.Pools.
	pools, err := database.AttachPools(svc, migrations.Latest())
	if err != nil {
		return nil, err
	}
	svc.Log = svc.Log.With("role", role)
	buf := buffer.New(svc.Redis, cfg.RedisTimeout)
	buf.MaxIdempotencyPerUser = cfg.IdempotencyMaxPerCredential
	a := &App{svc: svc}
	if cfg.SiteType == "secondary" {
		// The site service watches the main through this report (decisions §45): ingest is the one
		// service of a secondary that reaches the main database.
		a.loops = append(a.loops, service.Loop{Name: "main report", Run: func(ctx context.Context) error {
			database.PublishMainReport(ctx, svc.Redis, pools)
			return nil
		}})
	}
	if role != ingest.RoleWorker {
		status := ingest.Committed
		if cfg.SiteType == "secondary" {
			status = ingest.Replicated
		}
		store := &postgres.Store{DB: pools.Read, Write: pools.Write, Status: status}
		s := ingest.Service{
			Store: store, Buffer: buf, CommittedFilter: cfg.SiteType != "secondary",
			Site: cfg.SiteName, IdempotencyTTL: cfg.IdempotencyTTL, RetryAfter: cfg.RetryAfter,
			Metrics: ingest.NewMetrics(svc.Metrics),
		}
		if !cfg.BufferingEnabled {
			s.Direct = &postgres.Applier{DB: pools.Write, BatchRows: 5000, RefuseCollisions: true}
		}
		auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
		httpapi.Register(svc.API, &httpapi.Handlers{
			Auth:    auth,
			Service: ingest.NewService(s), BodyLimit: int64(cfg.BodyLimitBytes), BulkBodyLimit: int64(cfg.BulkBodyLimitBytes),
		})
		httpapi.RegisterDeadLetters(svc.API, auth, &httpapi.DeadLetters{
			Letters: admin.Letters{Insp: asynq.NewInspectorFromRedisClient(svc.Redis), Buf: buf}, Log: svc.Log})
		if s.CommittedFilter {
			svc.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "obsops_ingest_committed_filter_ready",
				Help: "1 when this API's committed filter rules out committed paths (built, following its stream); 0: every registration is checked in the database."},
				func() float64 {
					if buf.CommittedReady() {
						return 1
					}
					return 0
				}))
			a.loops = append(a.loops, service.Loop{Name: "committed filter", Run: func(ctx context.Context) error {
				buf.KeepCommitted(ctx, store, time.Second, svc.Log)
				return nil
			}})
		}
	}
	if role == ingest.RoleWorker && cfg.WorkerNice > 0 {
		// Not with -role all: the API shares the process.
		if err := worker.LowerPriority(cfg.WorkerNice); err != nil {
			return nil, fmt.Errorf("OPS_INGEST_WORKER_NICE: %w", err)
		}
	}
	if role != ingest.RoleAPI {
		if err := a.addWorker(cfg, buf, pools); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// addWorker adds the worker's loops: the asynq server and its handler (appliers and the probe
// of the main database), the orphan watch, the claims' release, and at a secondary site the
// replica release.
func (a *App) addWorker(cfg *ingest.Config, buf *buffer.Buffer, pools *database.Pools) error {
	// The worker's own pool on the main database, with I/O deadlines (a WAN that drops traffic
	// must not hang its connections).
	origin := "" // a secondary's replay names its site: the main's committed filter learns its files
	if cfg.SiteType == "secondary" {
		origin = cfg.SiteName
	}
	mainDB, err := postgres.OpenWorkerDB(cfg.MainDB(), cfg.DBMaxConns, 30*time.Second, origin)
	if err != nil {
		return err
	}
	probe, err := worker.OpenProbe(cfg.MainDB())
	if err != nil {
		_ = mainDB.Close()
		return err
	}
	log := a.svc.Log
	h := &worker.Handler{
		Apply:  &postgres.Applier{DB: mainDB, BatchRows: 5000},
		Buffer: buf, Log: log, Metrics: worker.NewMetrics(a.svc.Metrics),
		Secondary: cfg.SiteType == "secondary", Probe: probe,
		Appliers: min(worker.DefaultAppliers, cfg.DBMaxConns),
	}
	worker.RegisterIntegrityGauges(a.svc.Metrics, &postgres.Applier{DB: probe})
	srv := worker.New(a.svc.Redis, cfg.WorkerConcurrency, log, h)
	a.svc.AddReadiness("worker", func(context.Context) error { return srv.Ping() })
	a.loops = append(a.loops, service.Loop{Name: "worker", Run: func(ctx context.Context) error {
		defer mainDB.Close()
		defer probe.Close()
		hctx, stopHandler := context.WithCancel(context.WithoutCancel(ctx))
		defer stopHandler()
		h.Start(hctx)
		if err := srv.Start(h.Mux()); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		<-ctx.Done()
		stopHandler() // tasks waiting for the main database go back to the queue at once
		srv.Shutdown()
		return nil
	}}, service.Loop{Name: "orphan watch", Run: func(ctx context.Context) error {
		worker.WatchOrphans(ctx, buf, 5*time.Second, log)
		return nil
	}}, service.Loop{Name: "claims release", Run: func(ctx context.Context) error {
		worker.WatchClaims(ctx, buf, buffer.ReleaseInterval)
		return nil
	}})
	if h.Secondary {
		// Release cached records once the local replica (OPS_DATABASE_URL) has the commit.
		a.loops = append(a.loops, service.Loop{Name: "replica release", Run: func(ctx context.Context) error {
			worker.WatchReplica(ctx, pools.Read.DB, buf, 100*time.Millisecond, log)
			return nil
		}})
	}
	return nil
}

// Run serves HTTP with the role's background loops beside it (service.RunWithLoops): a failed
// loop stops the process, and the loops stop once the server has drained, before the chassis
// closes the pools they use.
func (a *App) Run(ctx context.Context) error { return a.svc.RunWithLoops(ctx, a.loops...) }
