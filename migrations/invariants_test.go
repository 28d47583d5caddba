package migrations_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/obsops/obsops/migrations"
)

// TestInvariantsHoldOnAFreshDatabase: every file of invariants/ is embedded, has its description
// line, is one query returning (id, detail) that runs against the latest schema, and finds
// nothing in a freshly migrated database (the seeded rows included).
func TestInvariantsHoldOnAFreshDatabase(t *testing.T) {
	files, err := filepath.Glob("invariants/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invariant files: %v", err)
	}
	invs, err := migrations.Invariants()
	if err != nil {
		t.Fatal(err)
	}
	if len(invs) != len(files) {
		t.Fatalf("%d invariants embedded, %d files", len(invs), len(files))
	}
	for _, inv := range invs {
		if strings.Contains(strings.ToUpper(inv.Query), "INSERT ") || strings.Contains(strings.ToUpper(inv.Query), "UPDATE ") ||
			strings.Contains(strings.ToUpper(inv.Query), "DELETE ") {
			t.Errorf("%s: an invariant only reads", inv.Name)
		}
		if len(inv.Description) < 20 {
			t.Errorf("%s: description %q says too little", inv.Name, inv.Description)
		}
	}
	db := migrated(t)
	found, err := migrations.CheckInvariants(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 0 {
		t.Fatalf("a fresh database violates invariants: %+v", found)
	}
}

// TestInvariantsFindAPlantedViolation: an execution that ends before it starts (stored by
// dropping the constraint that refuses it unflagged, as a database migrated before 00017 could
// hold) is reported with its id and both times, and only by its own invariant.
func TestInvariantsFindAPlantedViolation(t *testing.T) {
	db := migrated(t)
	const bad, good = "0193c0de-0000-7000-8000-0000000000b1", "0193c0de-0000-7000-8000-0000000000b2"
	for _, q := range []string{
		`ALTER TABLE executed_obs_units DROP CONSTRAINT executed_obs_units_ends_after_start`,
		`INSERT INTO executed_obs_units (id, start_time, end_time) VALUES ('` + bad + `', '2026-11-25T05:00:00Z', '2026-11-25T04:00:00Z')`,
		`INSERT INTO executed_obs_units (id, start_time, end_time) VALUES ('` + good + `', '2026-11-25T05:00:00Z', '2026-11-25T06:00:00Z')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	found, err := migrations.CheckInvariants(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Invariant != "executions_end_before_start" || found[0].ID != bad ||
		!strings.Contains(found[0].Detail, "05:00:00") || !strings.Contains(found[0].Detail, "04:00:00") {
		t.Fatalf("found %+v, want the one execution %s ending before it starts", found, bad)
	}
}
