// Package database gives a service its PostgreSQL pool: opened with the pool sizes obsops needs,
// checked by the service's readiness (reachable, schema migrated far enough) and closed at
// shutdown. It is apart from the chassis (pkg/service) so a binary without a database, the
// gateway, links no SQL driver.
package database

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // PostgreSQL driver for sqlx

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
)

// Open opens a PostgreSQL pool whose idle size equals its open size: with Go's default of two
// idle connections a busy service churns connections and loses most of its throughput.
func Open(dsn string, maxConns int) (*sqlx.DB, error) {
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_DATABASE_URL", Reason: err.Error()}
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// Attach opens svc's database (OPS_DATABASE_URL, OPS_DB_MAX_CONNS), adds the "database" and
// "migrations" readiness checks (the schema must have reached expectedMigration, normally
// migrations.Latest()) and closes the pool after the service's shutdown hooks.
func Attach(svc *service.Service, expectedMigration int64) (*sqlx.DB, error) {
	if svc.Common.DatabaseURL == "" {
		return nil, &config.Invalid{Var: "OPS_DATABASE_URL", Reason: "required but not set"}
	}
	db, err := Open(svc.Common.DatabaseURL, svc.Common.DBMaxConns)
	if err != nil {
		return nil, err
	}
	svc.AddReadiness("database", db.PingContext)
	svc.AddReadiness("migrations", func(ctx context.Context) error { return CheckMigration(ctx, db, expectedMigration) })
	svc.OnClose("database", func(context.Context) error { return db.Close() })
	return db, nil
}

// CheckMigration fails unless the database schema has reached at least the expected version
// (a newer schema is fine: during a rolling upgrade the migration Job runs before new pods).
func CheckMigration(ctx context.Context, db *sqlx.DB, expected int64) error {
	var current int64
	err := db.GetContext(ctx, &current, `SELECT version_id FROM goose_db_version ORDER BY id DESC LIMIT 1`)
	if err != nil {
		return fmt.Errorf("schema not migrated: %w", err)
	}
	if current < expected {
		return fmt.Errorf("schema version %d, this build needs %d: run migrate up", current, expected)
	}
	return nil
}

// InTx runs fn in a transaction on db, committed when fn returns nil and rolled back otherwise
// (also when fn panics), so a store's multi-statement write is all or nothing.
func InTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return inTx(ctx, db, nil, fn)
}

// InReadTx runs fn in a READ ONLY transaction on db: one snapshot for several reads. Unlike
// InTx it works on a secondary site's replica, where lib/pq's default BEGIN READ WRITE is
// refused (SQLSTATE 0A000, "cannot set transaction read-write mode during recovery").
func InReadTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return inTx(ctx, db, &sql.TxOptions{ReadOnly: true}, fn)
}

func inTx(ctx context.Context, db *sqlx.DB, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	tx, err := db.BeginTxx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
