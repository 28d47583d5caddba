// Package testenv gives tests the real parts they run against: a fresh migrated PostgreSQL
// database, a private Redis server, the obsops binaries, and the whole suite behind the gateway.
//
// PostgreSQL comes from OPS_TEST_DATABASE_URL (an admin connection; `make test` points it at the
// project-local cluster) or the machine's server on 127.0.0.1:5432. Redis servers are started per
// test from the redis-server binary, with the services' ACL users (pkg/redisacl). Binaries come from
// OPS_BIN_DIR (`make test` builds ./bin) or are built on demand, and every service binary runs as
// its own PostgreSQL role and Redis user (ServiceCredentials), as in production.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver

	"github.com/obsops/obsops/migrations"
)

// AdminDatabaseURL is the connection used to create and drop test databases.
func AdminDatabaseURL() string {
	if v := os.Getenv("OPS_TEST_DATABASE_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Database creates a fresh database migrated to the latest schema, returns its URL and drops it
// when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	admin := AdminDatabaseURL()
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatalf("testenv: open admin database: %v", err)
	}
	defer db.Close()
	name := "obsops_t_" + randomHex(6)
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("testenv: create database (is PostgreSQL running? run tests with `make test`): %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("postgres", admin)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testenv: OPS_TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	dsn := u.String()

	mdb, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", name, err)
	}
	defer mdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := migrations.Up(ctx, mdb); err != nil {
		t.Fatalf("testenv: migrate %s: %v", name, err)
	}
	return dsn
}

// RepoRoot is the directory holding go.work.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: go.work not found above the test directory")
		}
		dir = parent
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func envList(base []string, extra map[string]string) []string {
	var out []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, "OPS_") { // a developer's own OPS_* must not leak into a test
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, fmt.Sprintf("%s=%s", k, v))
	}
	return out
}

// RequireInvariants fails the test if the database at dsn breaks any invariant of
// migrations/invariants (what `ingest admin check` runs), naming each violation. The fault and
// end-to-end tests call it at their end: whatever they did to the suite, the database must not
// hold a contradiction.
func RequireInvariants(t testing.TB, dsn string) {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: invariants: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	found, err := migrations.CheckInvariants(ctx, db)
	if err != nil {
		t.Fatalf("testenv: check invariants: %v", err)
	}
	for _, v := range found {
		t.Errorf("invariant %s violated by %s: %s (%s)", v.Invariant, v.ID, v.Detail, v.Description)
	}
	if len(found) > 0 {
		t.FailNow()
	}
}
