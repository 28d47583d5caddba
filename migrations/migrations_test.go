package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	_ "github.com/lib/pq"

	"github.com/obsops/obsops/migrations"
)

// freshDatabase creates an empty database (pkg/testenv cannot be used here: it migrates, and it
// depends on this module).
func freshDatabase(t *testing.T) string {
	admin := os.Getenv("OPS_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "obsops_m_" + hex.EncodeToString(b)
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		db, _ := sql.Open("postgres", admin)
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String()
}

func TestConcurrentUpIsSerialisedByTheAdvisoryLock(t *testing.T) {
	dsn := freshDatabase(t)
	const runners = 4
	var wg sync.WaitGroup
	errs := make(chan error, runners)
	versions := make(chan int64, runners)
	for range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("postgres", dsn)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			r, err := migrations.Up(context.Background(), db)
			errs <- err
			versions <- r.Version
		}()
	}
	wg.Wait()
	close(errs)
	close(versions)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent up: %v", err)
		}
	}
	for v := range versions {
		if v != migrations.Latest() {
			t.Fatalf("version %d, want %d", v, migrations.Latest())
		}
	}
	db, _ := sql.Open("postgres", dsn)
	defer db.Close()
	var applied int
	if err := db.QueryRow(`SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	// Count the files, not the latest version: numbers are reserved per branch, so a gap (e.g.
	// 00006 merged before 00005) is a normal state of the history.
	files, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(files) {
		t.Fatalf("%d migrations recorded, want %d (each applied exactly once)", applied, len(files))
	}
}

func TestEveryMigrationRollsBackAndReapplies(t *testing.T) {
	dsn := freshDatabase(t)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if v, _ := p.GetDBVersion(ctx); v != 0 {
		t.Fatalf("after down: version %d", v)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if v, _ := p.GetDBVersion(ctx); v != migrations.Latest() {
		t.Fatalf("after re-apply: version %d", v)
	}
}
