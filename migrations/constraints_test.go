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

// TestMembershipMigrationNamesExistingViolations: migration 18 (membership stored once, paths
// unique per module, package names unique per execution) stops on a file in two packages (one
// naming it, the other listing it — the two places 00007 kept membership), then on two packages
// of one name, then on one path twice, each time naming the rows and leaving the database at 17;
// corrected, it moves every membership into raw_data_package_files.
func TestMembershipMigrationNamesExistingViolations(t *testing.T) {
	ctx := context.Background()
	db := connect(t, freshDatabase(t))
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	const (
		eou  = "0193c0de-0000-7000-8000-0000000000e0"
		p1   = "0193c0de-0000-7000-8000-0000000000a1"
		p2   = "0193c0de-0000-7000-8000-0000000000a2"
		f1   = "0193c0de-0000-7000-8000-0000000000f1"
		f2   = "0193c0de-0000-7000-8000-0000000000f2"
		file = `INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum, raw_data_package_id)
VALUES ($1, $2, 11, $3, 1, 'xxh64:0123456789abcdef', $4)`
	)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO raw_data_packages (id, executed_obs_unit_id, instrument_module_id, name, file_ids) VALUES ($1, $2, 11, 'a', '{}'), ($3, $2, 11, 'a', ARRAY[$4::uuid])`, p1, eou, p2, f1)
	exec(file, f1, eou, "x/1.fits", p1)
	exec(file, f2, eou, "x/1.fits", nil)
	refused := func(want ...string) {
		t.Helper()
		_, err := p.UpTo(ctx, 18)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("migration 18: %v, want a refusal containing %q", err, w)
			}
		}
		if v, _ := p.GetDBVersion(ctx); v != 17 {
			t.Fatalf("version %d after the refusal, want 17", v)
		}
	}
	refused("belong to two packages", f1)
	exec(`UPDATE raw_data_packages SET file_ids = '{}' WHERE id = $1`, p2)
	refused("used twice in one execution", p1, p2)
	exec(`UPDATE raw_data_packages SET name = 'b' WHERE id = $1`, p2)
	refused("registered twice on one instrument module", f1, f2)
	exec(`UPDATE raw_data_files SET path = 'x/2.fits' WHERE id = $1`, f2)
	exec(`UPDATE raw_data_packages SET file_ids = ARRAY[$2::uuid] WHERE id = $1`, p2, f2)
	if _, err := p.UpTo(ctx, 18); err != nil {
		t.Fatalf("after the corrections: %v", err)
	}
	var got string
	if err := db.QueryRow(`SELECT string_agg(file_id || '>' || package_id, ' ' ORDER BY file_id) FROM raw_data_package_files`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := f1 + ">" + p1 + " " + f2 + ">" + p2; got != want {
		t.Fatalf("memberships %q, want %q", got, want)
	}
}
