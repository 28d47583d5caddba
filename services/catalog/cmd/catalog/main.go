// Command catalog serves observing programs, sources, name resolution, instruments and
// visibility; `catalog admin seed-demo` loads a small real catalogue for a new installation.
package main

import (
	"context"
	"os"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/admin"
	"github.com/obsops/obsops/services/catalog/app"
	"github.com/obsops/obsops/services/catalog/visibility"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("catalog", run) }

func run(ctx context.Context) error {
	var cfg catalog.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		return admin.Run(ctx, &cfg, os.Stdout, os.Args[2:])
	}
	var vcfg visibility.Config
	if err := config.Load(&vcfg); err != nil {
		return err
	}
	common := cfg.Common // the server takes the largest route limit; each route holds to its own
	common.BodyLimitBytes = max(cfg.BodyLimitBytes, cfg.ImportBodyLimitBytes)
	svc, err := service.New(service.Options{
		Name: "catalog", Title: "obsops catalog", Addr: cfg.Addr, Common: common,
		Description: "Observing programs, sources, name resolution, instruments and visibility.",
		Build:       service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	a, err := app.New(&cfg, &vcfg, svc)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
