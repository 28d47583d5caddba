// Package migrations holds the one schema history of the obsops database and runs it.
//
// The versioned SQL files beside this file are the history (goose migrations, applied once each);
// functions/ holds the current body of every PL/pgSQL function, applied after the last migration
// on every Up (see docs/schema.md). Both are embedded into every binary that imports the package,
// so the migrate command and the services' readiness checks always agree on the expected version.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

//go:embed functions/*.sql
var functionFiles embed.FS

//go:embed grants/*.sql
var grantFiles embed.FS

// LockID is the PostgreSQL advisory-lock key that serialises concurrent migration runs
// (several replicas or Kubernetes Jobs may start at once).
const LockID int64 = 0x6f62736f7073 // "obsops"

// Latest is the highest migration version shipped in this build: the version a service
// expects the database to have reached before it reports ready.
func Latest() int64 {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(fmt.Sprintf("migrations: embedded files unreadable: %v", err))
	}
	var latest int64
	for _, e := range entries {
		prefix, _, ok := strings.Cut(path.Base(e.Name()), "_")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(prefix, 10, 64); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// NewProvider returns a goose provider over the embedded SQL that holds a PostgreSQL session
// advisory lock for the duration of every Up and Down, so concurrent runs are safe.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(LockID),
		lock.WithLockTimeout(1, 600), // poll every second for up to ten minutes
	)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
}

// Result is what Up did.
type Result struct {
	Migrations []*goose.MigrationResult // the versioned migrations applied, in order
	Functions  []string                 // the function files applied (none when not at Latest)
	Grants     []string                 // the grant files applied (none when not at Latest)
	Version    int64                    // the database's version afterwards
}

// Up applies every pending migration, then the current function bodies (ApplyFunctions), then
// the services' roles and privileges (ApplyGrants), and reports what it did. It is the one way to bring a database up to date: the migrate command and
// the tests' databases (pkg/testenv) both use it.
func Up(ctx context.Context, db *sql.DB) (Result, error) {
	p, err := NewProvider(db)
	if err != nil {
		return Result{}, err
	}
	var r Result
	r.Migrations, err = p.Up(ctx)
	if err != nil {
		return r, err
	}
	if r.Functions, err = ApplyFunctions(ctx, db); err != nil {
		return r, err
	}
	if r.Grants, err = ApplyGrants(ctx, db); err != nil {
		return r, err
	}
	r.Version, err = p.GetDBVersion(ctx)
	return r, err
}

// ApplyFunctions runs every file of functions/ (CREATE OR REPLACE FUNCTION, idempotent) in name
// order in one transaction, so the database holds exactly the bodies in those files, and returns
// the files applied. Goose has no repeatable migrations, so this runs after them on every Up.
//
// It applies them only when the database is at Latest: below it (after a down) the history's own
// bodies fit the older tables, and above it a newer build has applied its newer bodies. The
// transaction holds the migrations' advisory lock (LockID), which serialises it with other runs:
// concurrent CREATE OR REPLACE of one function fails ("tuple concurrently updated").
func ApplyFunctions(ctx context.Context, db *sql.DB) ([]string, error) {
	names, err := fs.Glob(functionFiles, "functions/*.sql") // sorted: a stable order
	if err != nil {
		return nil, err
	}
	applied, err := applyAtLatest(ctx, db, "functions", func(tx *sql.Tx) error { return execFiles(ctx, tx, functionFiles, names) })
	if !applied {
		return nil, err
	}
	return names, err
}

// applyAtLatest runs apply in one transaction under the migrations' advisory lock (LockID), and
// only when the database is at this build's latest version (below it the files do not fit the
// older tables; above it a newer build has applied its newer files). what names it in errors;
// applied is true when apply ran and committed.
func applyAtLatest(ctx context.Context, db *sql.DB, what string, apply func(*sql.Tx) error) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, LockID); err != nil {
		return false, fmt.Errorf("%s: lock: %w", what, err)
	}
	var version sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&version); err != nil {
		return false, fmt.Errorf("%s: database version: %w", what, err)
	}
	if version.Int64 != Latest() {
		return false, nil
	}
	if err := apply(tx); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// execFiles runs each named file of files on tx. No arguments: lib/pq sends the simple query
// protocol, so a file may hold several statements.
func execFiles(ctx context.Context, tx *sql.Tx, files fs.FS, names []string) error {
	for _, name := range names {
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
