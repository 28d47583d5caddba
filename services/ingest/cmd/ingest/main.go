// Command ingest serves the buffered ingest API (-role api), drains the buffer into the main
// database (-role worker), or both (-role all); `ingest admin ...` manages the dead letters.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/admin"
	"github.com/obsops/obsops/services/ingest/app"
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
		return app.ErrRole(*role)
	}
	if err := config.Load(&cfg); err != nil {
		return err
	}
	svc, err := service.New(app.Options(&cfg, service.Build{Version: version, Commit: commit}))
	if err != nil {
		return err
	}
	a, err := app.New(svc, &cfg, *role)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
