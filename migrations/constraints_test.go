package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/obsops/obsops/migrations"
)

// TestConstraintMigrationNamesExistingViolations: a migration that adds an integrity constraint
// first looks for rows that break it and, if it finds any, stops with a message naming them and
// the query that lists them all, leaving the database as it was; once they are corrected it
// applies. Then the database itself refuses the contradiction.
func TestConstraintMigrationNamesExistingViolations(t *testing.T) {
	ctx := context.Background()
	db := connect(t, freshDatabase(t))
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	const bad = "0193c0de-0000-7000-8000-000000000001"
	if _, err := db.Exec(`INSERT INTO executed_obs_units (id, start_time, end_time) VALUES ($1, '2026-11-25T05:00:00Z', '2026-11-25T04:00:00Z')`, bad); err != nil {
		t.Fatal(err)
	}
	_, err = p.UpTo(ctx, 17)
	if err == nil || !strings.Contains(err.Error(), "end before they start") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("migration 17 over an execution ending before it starts: %v, want a refusal naming %s", err, bad)
	}
	if v, _ := p.GetDBVersion(ctx); v != 16 {
		t.Fatalf("version %d after the refusal, want 16", v)
	}
	if _, err := db.Exec(`UPDATE executed_obs_units SET end_time = '2026-11-25T06:00:00Z' WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 17); err != nil {
		t.Fatalf("after the correction: %v", err)
	}
	if _, err := db.Exec(`UPDATE executed_obs_units SET end_time = '2026-11-25T04:00:00Z' WHERE id = $1`, bad); err == nil ||
		!strings.Contains(err.Error(), "executed_obs_units_ends_after_start") {
		t.Fatalf("the database stored an execution ending before it starts: %v", err)
	}
}
