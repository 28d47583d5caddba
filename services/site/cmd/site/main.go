// Command site serves public site information, suite health and buffer statistics.
package main

import (
	"context"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/site"
	"github.com/obsops/obsops/services/site/app"
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
	a, err := app.New(&cfg, svc, version, commit)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
