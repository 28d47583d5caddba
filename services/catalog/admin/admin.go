// Package admin is `catalog admin`: commands run from the command line against the same
// database and through the same store as the service.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/postgres"
)

// Usage lists the subcommands.
const Usage = `usage: catalog admin COMMAND

commands:
  seed-demo   load a few real sources and observing programs (idempotent: existing names are left alone)`

// Run executes one admin command.
func Run(ctx context.Context, cfg *catalog.Config, stdout io.Writer, args []string) error {
	if len(args) != 1 || args[0] != "seed-demo" {
		return errors.New(Usage)
	}
	if cfg.DatabaseURL == "" {
		return errors.New("OPS_DATABASE_URL: required but not set")
	}
	db, err := database.Open(cfg.MainDB(), 2) // it writes: at a secondary site, on the main site
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := SeedDemo(ctx, &postgres.Store{DB: db})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "seed-demo: %d sources and %d programs created, %d sources and %d programs already there\n",
		res.SourcesCreated, res.ProgramsCreated, res.SourcesKept, res.ProgramsKept)
	return err
}
