package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

//go:embed invariants/*.sql
var invariantFiles embed.FS

// Invariant is one rule the database must always satisfy, as a read-only query that lists the
// rows breaking it. The files of invariants/ are the operator's fsck (`ingest admin check`) and
// what the fault and end-to-end tests check at their end (pkg/testenv.RequireInvariants): a
// constraint the database cannot express, or one it can but that an older database (or a
// migration's refusal) may still hold violations of, gets one.
type Invariant struct {
	Name        string // the file's name without .sql, e.g. executions_end_before_start
	Description string // the file's first line, without its "-- "
	Query       string // the whole file: one SELECT returning (id text, detail text) per violation
}

// Violation is one row an invariant's query returned: the record breaking it and how.
type Violation struct {
	Invariant   string // Invariant.Name
	Description string // Invariant.Description
	ID          string // the offending record's id
	Detail      string // what is wrong with it, in words
}

// Invariants returns every embedded invariant in name order. A file without its description
// line is an error: the checker prints it next to each violation.
func Invariants() ([]Invariant, error) {
	names, err := fs.Glob(invariantFiles, "invariants/*.sql") // sorted
	if err != nil {
		return nil, err
	}
	out := make([]Invariant, 0, len(names))
	for _, name := range names {
		body, err := fs.ReadFile(invariantFiles, name)
		if err != nil {
			return nil, err
		}
		first, _, _ := strings.Cut(string(body), "\n")
		desc, ok := strings.CutPrefix(strings.TrimSpace(first), "-- ")
		if !ok || strings.TrimSpace(desc) == "" {
			return nil, fmt.Errorf("%s: the first line must be `-- <description>`", name)
		}
		out = append(out, Invariant{Name: strings.TrimSuffix(path.Base(name), ".sql"),
			Description: strings.TrimSpace(desc), Query: string(body)})
	}
	return out, nil
}

// CheckInvariants runs every invariant over db in one read-only, repeatable-read transaction
// (one snapshot, so two invariants never see the database at different moments) and returns
// the violations found, grouped by invariant in name order; none when the database is
// consistent. It changes nothing and can run against a live database.
func CheckInvariants(ctx context.Context, db *sql.DB) ([]Violation, error) {
	invs, err := Invariants()
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var out []Violation
	for _, inv := range invs {
		found, err := check(ctx, tx, inv)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

func check(ctx context.Context, tx *sql.Tx, inv Invariant) ([]Violation, error) {
	rows, err := tx.QueryContext(ctx, inv.Query)
	if err != nil {
		return nil, fmt.Errorf("invariant %s: %w", inv.Name, err)
	}
	defer rows.Close()
	if cols, err := rows.Columns(); err != nil || len(cols) != 2 {
		return nil, fmt.Errorf("invariant %s: must return two columns (id, detail), returns %v (%v)", inv.Name, cols, err)
	}
	var out []Violation
	for rows.Next() {
		var id, detail sql.NullString
		if err := rows.Scan(&id, &detail); err != nil {
			return nil, fmt.Errorf("invariant %s: %w", inv.Name, err)
		}
		out = append(out, Violation{Invariant: inv.Name, Description: inv.Description, ID: id.String, Detail: detail.String})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("invariant %s: %w", inv.Name, err)
	}
	return out, nil
}
