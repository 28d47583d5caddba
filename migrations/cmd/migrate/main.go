// Command migrate applies, rolls back or reports the obsops schema migrations.
//
// Usage: migrate up|down|status. up applies the pending migrations, then the current function
// bodies (migrations/functions), then the services' roles and grants (migrations/grants), and sets
// the roles' passwords from the files in OPS_ROLE_PASSWORDS_DIR (one per service) when it is set; down rolls back the last migration only. The database comes from OPS_DATABASE_URL (or the file named by
// OPS_DATABASE_URL_FILE). Runs are serialised by a PostgreSQL advisory lock, so several replicas or
// Jobs may start it at once.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	_ "github.com/lib/pq"

	"github.com/obsops/obsops/migrations"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: migrate up|down|status")
	}
	dsn, err := databaseURL()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return fmt.Errorf("OPS_DATABASE_URL: %w", err)
	}
	defer db.Close()
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "migrate")

	switch os.Args[1] {
	case "up":
		res, err := migrations.Up(ctx, db)
		for _, r := range res.Migrations {
			log.Info("applied", "version", r.Source.Version, "file", r.Source.Path, "duration_ms", r.Duration.Milliseconds())
		}
		if err != nil {
			return err
		}
		if len(res.Functions) > 0 {
			log.Info("functions applied", "files", res.Functions)
			log.Info("grants applied", "files", res.Grants)
		} else {
			log.Info("functions and grants not applied: the database is past this build's latest migration")
		}
		// The services' role passwords, from a mounted Secret (docs/operations.md, "Database roles").
		if dir := os.Getenv("OPS_ROLE_PASSWORDS_DIR"); dir != "" {
			set, err := migrations.SetRolePasswords(ctx, db, dir)
			if err != nil {
				return fmt.Errorf("OPS_ROLE_PASSWORDS_DIR: %w", err)
			}
			log.Info("role passwords set", "services", set)
		}
	case "down":
		r, err := p.Down(ctx)
		if err != nil {
			return err
		}
		log.Info("rolled back", "version", r.Source.Version, "file", r.Source.Path)
	case "status":
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st {
			applied := "pending"
			if s.State == "applied" {
				applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
			}
			fmt.Printf("%-6d %-40s %s\n", s.Source.Version, s.Source.Path, applied)
		}
	default:
		return fmt.Errorf("unknown command %q: usage: migrate up|down|status", os.Args[1])
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	log.Info("database version", "version", v, "latest", migrations.Latest())
	return nil
}

func databaseURL() (string, error) {
	if f := os.Getenv("OPS_DATABASE_URL_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("OPS_DATABASE_URL_FILE: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if v := os.Getenv("OPS_DATABASE_URL"); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("OPS_DATABASE_URL: required")
}
