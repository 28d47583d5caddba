package main

import (
	"context"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/catalog/httpapi"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
	"github.com/obsops/obsops/services/catalog/visibility/store"
)

// visibilityRoutes wires the /visibility routes and, unless disabled, starts the precalculation
// worker (asynq queue "visibility") in this process, stopped at shutdown. site is the engine's
// site, built from the catalog's site configuration.
func visibilityRoutes(svc *service.Service, pools *database.Pools, cfg *visibility.Config, site *visibility.Site) (*httpapi.Visibility, error) {
	st := &store.Store{DB: pools.Read, Write: pools.Write}
	heatmaps := precalc.New(st, site, svc.Redis, cfg.SyncMaxSources, cfg.JobChunk, svc.Log, svc.Metrics)
	if cfg.Worker {
		srv, mux := precalc.NewWorker(svc.Redis, heatmaps)
		if err := srv.Start(mux); err != nil {
			return nil, err
		}
		svc.OnShutdown("visibility worker", func(context.Context) error { srv.Shutdown(); return nil })
	}
	return &httpapi.Visibility{Store: st, Site: site, Heatmaps: heatmaps, Log: svc.Log}, nil
}
