package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/obsops/obsops/migrations"
)

// function is one function of a database as PostgreSQL stores it.
type function struct {
	oid uint32
	def string // pg_get_functiondef
}

// functions returns every function of the public schema that no extension owns (q3c and pg_trgm
// bring their own), by signature (regprocedure).
func functions(t *testing.T, db *sql.DB) map[string]function {
	t.Helper()
	rows, err := db.Query(`
		SELECT p.oid::regprocedure::text, p.oid, pg_get_functiondef(p.oid)
		  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = 'public'
		   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]function{}
	for rows.Next() {
		var sig string
		var f function
		if err := rows.Scan(&sig, &f.oid, &f.def); err != nil {
			t.Fatal(err)
		}
		out[sig] = f
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// definitions is functions without the oids.
func definitions(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for sig, f := range functions(t, db) {
		out[sig] = f.def
	}
	return out
}

func connect(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// migrated returns a fresh database brought up to date by migrations.Up.
func migrated(t *testing.T) *sql.DB {
	t.Helper()
	db := connect(t, freshDatabase(t))
	if _, err := migrations.Up(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// fileDefinitions applies the files of functions/ alone to an empty database and returns the
// definitions they give. Bodies are not checked against tables there are none of.
func fileDefinitions(t *testing.T) map[string]string {
	t.Helper()
	db := connect(t, freshDatabase(t))
	names, err := filepath.Glob("functions/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("functions/*.sql: %v (%d files)", err, len(names))
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.Exec(`SET LOCAL check_function_bodies = off`); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return definitions(t, db)
}

// sameDefinitions fails the test unless got holds exactly the functions of want, with the same
// definitions.
func sameDefinitions(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for _, sig := range slices.Sorted(maps.Keys(got)) {
		w, ok := want[sig]
		switch {
		case !ok:
			t.Errorf("%s: %s has no file in functions/ (add its current body there)", what, sig)
		case got[sig] != w:
			t.Errorf("%s: %s differs from its file:\n--- database\n%s\n--- file\n%s", what, sig, got[sig], w)
		}
	}
	for _, sig := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[sig]; !ok {
			t.Errorf("%s: %s of functions/ is missing from the database", what, sig)
		}
	}
}

func TestMigratedFunctionsAreTheFiles(t *testing.T) {
	sameDefinitions(t, "after Up", definitions(t, migrated(t)), fileDefinitions(t))
}

var (
	createFunction = regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?:public\.)?([a-z_][a-z0-9_]*)\s*\(`)
	lineComment    = regexp.MustCompile(`--[^\n]*`)
)

// createdFunctions returns the names of the functions the SQL files matching pattern create.
func createdFunctions(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range createFunction.FindAllStringSubmatch(lineComment.ReplaceAllString(string(b), ""), -1) {
			name := strings.ToLower(m[1])
			if !slices.Contains(out[name], p) {
				out[name] = append(out[name], p)
			}
		}
	}
	return out
}

// A function a migration creates either is dropped by the history or lives on with its current
// body in functions/; and a function of functions/ is created by a migration, so migrating down
// past that migration drops it.
func TestEveryFunctionOfTheHistoryHasAFile(t *testing.T) {
	history := createdFunctions(t, "0*.sql")
	files := createdFunctions(t, "functions/*.sql")
	live := map[string]bool{}
	for sig := range functions(t, migrated(t)) {
		live[sig[:strings.IndexByte(sig, '(')]] = true
	}
	if len(history) == 0 || len(files) == 0 {
		t.Fatalf("found %d functions in the migrations and %d in functions/", len(history), len(files))
	}
	for _, name := range slices.Sorted(maps.Keys(history)) {
		if live[name] && files[name] == nil {
			t.Errorf("%s (created in %v) exists after migrating but has no file in functions/", name, history[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(live)) {
		if files[name] == nil && history[name] == nil { // made some other way (a DO block, a typo'd pattern)
			t.Errorf("%s exists after migrating but has no file in functions/", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if history[name] == nil {
			t.Errorf("%s (%v) is created by no migration: create it in one (its Down drops it)", name, files[name])
		}
		if !live[name] {
			t.Errorf("%s (%v) does not exist after migrating", name, files[name])
		}
	}
}

func TestApplyingTheFunctionsAgainChangesNothing(t *testing.T) {
	db := migrated(t)
	ctx := context.Background()
	before := functions(t, db)
	applied, err := migrations.ApplyFunctions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("functions/*.sql")
	if len(applied) != len(files) {
		t.Fatalf("applied %v, want the %d files of functions/", applied, len(files))
	}
	if after := functions(t, db); !maps.Equal(before, after) {
		t.Fatalf("a second application changed the functions:\nbefore %v\nafter  %v", before, after)
	}
	r, err := migrations.Up(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Migrations) != 0 || r.Version != migrations.Latest() {
		t.Fatalf("a second Up applied %d migrations, version %d", len(r.Migrations), r.Version)
	}
	if after := functions(t, db); !maps.Equal(before, after) {
		t.Fatalf("a second Up changed the functions:\nbefore %v\nafter  %v", before, after)
	}
}

// Below the latest version the history's own bodies stand (they fit the tables of that
// version); back at the latest, the files' bodies do again.
func TestDownAndUpEndsWithTheFileBodies(t *testing.T) {
	want := fileDefinitions(t)
	db := migrated(t)
	ctx := context.Background()
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	// 13: below 00014, which rewrote the counter triggers; 11: below 00012
	// (transfer_complete_batch); 9: below every transfer function but the first ones.
	for _, v := range []int64{13, 11, 9} {
		if _, err := p.DownTo(ctx, v); err != nil {
			t.Fatalf("down to %d: %v", v, err)
		}
		applied, err := migrations.ApplyFunctions(ctx, db)
		if err != nil || applied != nil {
			t.Fatalf("at version %d: functions applied %v (%v), want none below the latest version", v, applied, err)
		}
		if v == 13 {
			const sig = "transfer_count_operations()"
			if got := definitions(t, db)[sig]; got == want[sig] {
				t.Fatalf("at version 13, %s has its file's body, want the one 00014's Down restored", sig)
			}
		}
		r, err := migrations.Up(ctx, db)
		if err != nil {
			t.Fatalf("up from %d: %v", v, err)
		}
		if len(r.Functions) == 0 {
			t.Fatalf("up from %d applied no functions", v)
		}
		sameDefinitions(t, fmt.Sprintf("down to %d and up", v), definitions(t, db), want)
	}
}
