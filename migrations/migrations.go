// Package migrations holds the one schema history of the obsops database and runs it.
//
// The SQL files beside this file are embedded into every binary that imports the package, so the
// migrate command and the services' readiness checks always agree on the expected version.
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

// Up applies every pending migration and returns the resulting version.
func Up(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := NewProvider(db)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}
