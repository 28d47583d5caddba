// Command authtoken serves identity and API tokens; `authtoken admin ...` bootstraps a fresh
// install from the command line (see `authtoken admin` for the commands).
package main

import (
	"context"
	"os"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/admin"
	"github.com/obsops/obsops/services/authtoken/app"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("authtoken", run) }

func run(ctx context.Context) error {
	var cfg authtoken.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		return admin.Run(ctx, &admin.Env{Config: &cfg, Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[2:])
	}
	svc, err := service.New(service.Options{
		Name: "authtoken", Title: "obsops identity and API tokens", Addr: cfg.Addr, Common: cfg.Common,
		Description: "Identity-provider login, session JWTs and API tokens.",
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
