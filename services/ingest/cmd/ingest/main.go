// Command ingest serves the buffered ingest API (-role api), drains the buffer into the main
// database (-role worker), or both (-role all).
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/httpapi"
	"github.com/obsops/obsops/services/ingest/worker"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("ingest", run) }

func run(ctx context.Context) error {
	role := flag.String("role", ingest.RoleAll, "api, worker or all")
	flag.Parse()
	if !ingest.ValidRole(*role) {
		return fmt.Errorf("-role: invalid value %q: must be one of api, worker, all", *role)
	}
	var cfg ingest.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	svc, err := service.New(service.Options{
		Name: "ingest", Title: "obsops ingest", Addr: cfg.Addr, Common: cfg.Common,
		Description: "Executed obs units, raw data files and raw data packages; critical writes are buffered.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	if _, err := database.Attach(svc, migrations.Latest()); err != nil {
		return err
	}
	svc.Log = svc.Log.With("role", *role)
	if *role != ingest.RoleWorker {
		auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
		httpapi.Register(svc.API, &httpapi.Handlers{Auth: auth})
	}
	if *role != ingest.RoleAPI {
		srv := worker.New(svc.Redis, cfg.WorkerConcurrency, svc.Log)
		if err := srv.Start(worker.Mux()); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		svc.AddReadiness("worker", func(context.Context) error { return srv.Ping() })
		svc.OnShutdown("worker", func(context.Context) error { srv.Shutdown(); return nil })
	}

	return svc.Run(ctx)
}
