// Command transfer serves the transfer service. Data transfer, unpacking, archiving and staging operations.
package main

import (
	"context"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/httpapi"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("transfer", run) }

func run(ctx context.Context) error {
	var cfg transfer.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	svc, err := service.New(service.Options{
		Name: "transfer", Title: "obsops transfer", Description: "Data transfer, unpacking, archiving and staging operations.", Addr: cfg.Addr, Common: cfg.Common,
		Build: service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	if _, err := database.Attach(svc, migrations.Latest()); err != nil {
		return err
	}
	auth := authn.NewRemote(cfg.Config, cfg.AuthtokenURL, cfg.InternalSecret, svc.Redis, svc.Log)
	httpapi.Register(svc.API, &httpapi.Handlers{Auth: auth})

	return svc.Run(ctx)
}
