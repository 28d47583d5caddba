// Command site serves public site information, suite health, buffer statistics and the site's
// weather series; `site admin load-weather FILE` stores a file of weather readings (the demo
// series of `make up`).
package main

import (
	"context"
	"fmt"
	"os"

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
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		if len(os.Args) != 4 || os.Args[2] != "load-weather" {
			return fmt.Errorf("usage: site admin load-weather FILE")
		}
		n, err := app.LoadWeather(ctx, &cfg, os.Args[3])
		if err != nil {
			return err
		}
		fmt.Printf("%d weather readings stored from %s\n", n, os.Args[3])
		return nil
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
