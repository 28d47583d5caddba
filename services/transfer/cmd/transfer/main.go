// Command transfer serves the transfer service: the operations pipeline, its planner, the
// movers' agent API, resets, reconcile and the live overview (wired in package app).
package main

import (
	"context"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/app"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("transfer", run) }

func run(ctx context.Context) error {
	var cfg transfer.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if cfg.Secondary() { // its planner, leases and movers write all the time: see docs/two-sites.md, "Services at a secondary site"
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
	a, err := app.New(&cfg, svc)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
