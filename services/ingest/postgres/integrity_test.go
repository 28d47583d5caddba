package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// invariant runs migrations/invariants/<name>.sql (the checker's query, read-only) and returns
// its rows as "id: detail".
func invariant(t *testing.T, db *sqlx.DB, name string) []string {
	t.Helper()
	q, err := os.ReadFile(filepath.Join("..", "..", "..", "migrations", "invariants", name+".sql"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(q), "-- "), "%s starts with its description", name)
	var rows []struct {
		ID     string `db:"id"`
		Detail string `db:"detail"`
	}
	require.NoError(t, db.SelectContext(t.Context(), &rows, string(q)), name)
	var out []string
	for _, r := range rows {
		out = append(out, r.ID+": "+r.Detail)
	}
	return out
}

// TestFinishBeforeStartIsFlagged: a start and a finish acknowledged separately whose times
// contradict each other (end before start) are both applied, in either order, and the execution
// is flagged inconsistent — not a dead letter (no error), not a silent contradiction: the
// invariant lists it and the gauge counts it. The database refuses the same contradiction
// unflagged.
func TestFinishBeforeStartIsFlagged(t *testing.T) {
	db := openDB(t)
	ou := seedObsUnit(t, db)
	a := &postgres.Applier{DB: db}
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	require.Empty(t, invariant(t, db, "executions_end_before_start"))
	c, err := a.Integrity(t.Context())
	require.NoError(t, err)
	require.Zero(t, c.InconsistentExecutions)

	for _, finishFirst := range []bool{true, false} {
		id := ingest.NewID()
		start := func() error {
			_, err := a.ApplyStart(t.Context(), ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
				Start: ingest.Start{ID: id, ObsUnitID: ou, InstrumentModuleID: 11, StartTime: at, Site: "FYST", Meta: json.RawMessage(`{}`)}})
			return err
		}
		finish := func() error {
			_, err := a.ApplyFinish(t.Context(), ingest.FinishTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, ID: id,
				Finish: ingest.Finish{EndTime: at.Add(-time.Hour), Status: ingest.StatusCompleted, Meta: json.RawMessage(`{}`)}})
			return err
		}
		if finishFirst {
			require.NoError(t, finish())
			require.NoError(t, start())
		} else {
			require.NoError(t, start())
			require.NoError(t, finish())
		}
		var reason string
		require.NoError(t, db.Get(&reason, `SELECT inconsistent FROM executed_obs_units WHERE id = $1 AND start_time IS NOT NULL AND end_time IS NOT NULL`, id))
		require.Contains(t, reason, "end_time")
		rows := invariant(t, db, "executions_end_before_start")
		require.NotEmpty(t, rows)
		require.Contains(t, strings.Join(rows, "\n"), id)
	}
	c, err = a.Integrity(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, c.InconsistentExecutions)

	// A consistent pair is not flagged; an unflagged contradiction is refused by the CHECK.
	ok := ingest.NewID()
	_, err = a.ApplyStart(t.Context(), ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
		Start: ingest.Start{ID: ok, ObsUnitID: ou, InstrumentModuleID: 11, StartTime: at, Site: "FYST", Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = a.ApplyFinish(t.Context(), ingest.FinishTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, ID: ok,
		Finish: ingest.Finish{EndTime: at.Add(time.Hour), Status: ingest.StatusCompleted, Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	require.Len(t, invariant(t, db, "executions_end_before_start"), 2)
	_, err = db.Exec(`UPDATE executed_obs_units SET end_time = start_time - interval '1 s' WHERE id = $1`, ok)
	require.ErrorContains(t, err, "executed_obs_units_ends_after_start")
	// Planted directly (flagged, as an operator's repair could leave it): listed.
	_, err = db.Exec(`UPDATE executed_obs_units SET end_time = start_time - interval '1 s', inconsistent = 'planted' WHERE id = $1`, ok)
	require.NoError(t, err)
	require.Len(t, invariant(t, db, "executions_end_before_start"), 3)
}

// TestWorkerRecordsCollisions: writes the API acknowledged separately (two sites' buffers) that
// collide — one path under two ids, one file in two packages, one package name twice in an
// execution — are applied without error (never a dead letter): the first stays, the other is
// kept in ingest_collisions (the losing record in full), listed by the invariant and counted.
// Alone and inside a shared batch transaction.
func TestWorkerRecordsCollisions(t *testing.T) {
	db := openDB(t)
	a := &postgres.Applier{DB: db}
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	eou := ingest.NewID()
	file := func(path, pkg string) ingest.File {
		return ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Path: path, SizeBytes: 5,
			Checksum: "xxh64:0123456789abcdef", RawDataPackageID: pkg, Meta: json.RawMessage(`{}`)}
	}
	files := func(fs ...ingest.File) postgres.Work {
		return postgres.Work{Files: &ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: fs}}
	}
	pkg := func(id, name string, ids ...string) postgres.Work {
		return postgres.Work{Package: &ingest.PackageTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
			Package: ingest.Package{ID: id, ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: name, FileIDs: ids}}}
	}
	apply := func(ws ...postgres.Work) {
		_, err := a.ApplyBatch(t.Context(), ws)
		require.NoError(t, err)
	}
	require.Empty(t, invariant(t, db, "ingest_collisions"))

	p1, p2, p3 := ingest.NewID(), ingest.NewID(), ingest.NewID()
	first := file("2026/11/25/scan1/a.fits", "")
	apply(files(first))
	second := file("2026/11/25/scan1/a.fits", "") // same path, another id
	apply(files(second, file("2026/11/25/scan1/b.fits", "")))
	apply(pkg(p1, "pkg-1", first.ID))
	apply(pkg(p2, "pkg-2", first.ID))                                                      // first is p1's
	apply(pkg(p3, "pkg-1"), files(file("2026/11/25/scan1/c.fits", p1)))                    // name taken, in a shared transaction
	apply(files(file("2026/11/25/scan1/c.fits", ""), file("2026/11/25/scan1/d.fits", ""))) // c's path again, among a new file
	joined := file("2026/11/25/scan1/e.fits", p2)
	apply(files(joined))
	apply(pkg(p1, "pkg-1", joined.ID)) // a replay of p1 naming a file of p2

	kinds := map[string]int{}
	rows, err := db.Queryx(`SELECT kind, record_id::text, other_id::text, record FROM ingest_collisions ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var kind, rec string
		var other, record *string
		require.NoError(t, rows.Scan(&kind, &rec, &other, &record))
		kinds[kind]++
		if kind == "file_path" && rec == second.ID {
			require.NotNil(t, other)
			require.Equal(t, first.ID, *other)
			require.NotNil(t, record)
			require.Contains(t, *record, second.Path, "the losing record is kept in full")
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"file_path": 2, "package_file": 2, "package_name": 1}, kinds)
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM raw_data_files WHERE path = '2026/11/25/scan1/a.fits'`))
	require.Equal(t, 1, n, "the first registration of the path stays")
	var owner string
	require.NoError(t, db.Get(&owner, `SELECT package_id::text FROM raw_data_package_files WHERE file_id = $1`, first.ID))
	require.Equal(t, p1, owner)
	require.NoError(t, db.Get(&owner, `SELECT package_id::text FROM raw_data_package_files WHERE file_id = $1`, joined.ID))
	require.Equal(t, p2, owner)
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM raw_data_packages WHERE id = $1`, p3))
	require.Zero(t, n)
	require.Len(t, invariant(t, db, "ingest_collisions"), 5)
	c, err := a.Integrity(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 5, c.Collisions)

	// The unique keys hold for writers other than the worker.
	_, err = db.Exec(`INSERT INTO raw_data_package_files (file_id, package_id) VALUES ($1, $2)`, first.ID, p2)
	require.ErrorContains(t, err, "raw_data_package_files_pkey")
	_, err = db.Exec(`INSERT INTO raw_data_packages (id, executed_obs_unit_id, instrument_module_id, name) VALUES ($1, $2, 11, 'pkg-1')`, ingest.NewID(), eou)
	require.ErrorContains(t, err, "raw_data_packages_execution_name")
	_, err = db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
VALUES ($1, $2, 11, '2026/11/25/scan1/a.fits', 1, 'xxh64:0123456789abcdef')`, ingest.NewID(), eou)
	require.ErrorContains(t, err, "raw_data_files_module_path")
}

// TestPackageForeignFilesInvariant: the invariant finds a package holding a file of another
// execution (planted directly in SQL: the API refuses it) and nothing otherwise.
func TestPackageForeignFilesInvariant(t *testing.T) {
	db := openDB(t)
	eou, other, pkg := ingest.NewID(), ingest.NewID(), ingest.NewID()
	_, err := db.Exec(`INSERT INTO raw_data_packages (id, executed_obs_unit_id, instrument_module_id, name) VALUES ($1, $2, 11, 'p')`, pkg, eou)
	require.NoError(t, err)
	own, foreign := ingest.NewID(), ingest.NewID()
	for _, f := range []struct{ id, eou, path string }{{own, eou, "a"}, {foreign, other, "b"}} {
		_, err := db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
VALUES ($1, $2, 11, $3, 1, 'xxh64:0123456789abcdef')`, f.id, f.eou, f.path)
		require.NoError(t, err)
	}
	_, err = db.Exec(`INSERT INTO raw_data_package_files (file_id, package_id) VALUES ($1, $2)`, own, pkg)
	require.NoError(t, err)
	require.Empty(t, invariant(t, db, "package_foreign_files"))
	_, err = db.Exec(`INSERT INTO raw_data_package_files (file_id, package_id) VALUES ($1, $2)`, foreign, pkg)
	require.NoError(t, err)
	rows := invariant(t, db, "package_foreign_files")
	require.Len(t, rows, 1)
	require.Contains(t, rows[0], pkg)
	require.Contains(t, rows[0], foreign)
}

// TestDirectJoinRefusesFileOfAnotherPackage: the direct writes (finalize adding files, a file
// update naming a package) put a file in a package only if it is in no other (409 listing it).
func TestDirectJoinRefusesFileOfAnotherPackage(t *testing.T) {
	db := openDB(t)
	a := &postgres.Applier{DB: db}
	s := &postgres.Store{DB: db, Status: ingest.Committed}
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	eou, p1, p2 := ingest.NewID(), ingest.NewID(), ingest.NewID()
	f := ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Path: "x", SizeBytes: 1,
		Checksum: "xxh64:0123456789abcdef", Meta: json.RawMessage(`{}`)}
	_, err := a.ApplyFiles(t.Context(), ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: []ingest.File{f}})
	require.NoError(t, err)
	for i, p := range []string{p1, p2} {
		_, err := a.ApplyPackage(t.Context(), ingest.PackageTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
			Package: ingest.Package{ID: p, ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: "p" + string(rune('1'+i))}})
		require.NoError(t, err)
	}
	ctx := context.Background()
	_, err = s.UpdateFile(ctx, f.ID, ingest.FileUpdate{RawDataPackageID: &p1}, nil, nil)
	require.NoError(t, err)
	_, err = s.UpdateFile(ctx, f.ID, ingest.FileUpdate{RawDataPackageID: &p2}, nil, nil)
	var ce *ingest.ConflictError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Contains(t, ce.Msg, f.ID)
	_, _, err = s.Finalize(ctx, p2, ingest.Finalize{SizeBytes: 1, Checksum: "xxh64:0123456789abcdef", FileIDs: []string{f.ID}}, nil, nil)
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Contains(t, ce.Msg, f.ID)
	var status string
	require.NoError(t, db.Get(&status, `SELECT status FROM raw_data_packages WHERE id = $1`, p2))
	require.Equal(t, "building", status, "the refused finalize changed nothing")
}

// TestDirectWritesRefuseCollisions: with buffering disabled the API answers once the write is
// applied, so a collision (a path another file took concurrently, a name, a file of another
// package) fails the write, rolled back — answered 409 — instead of being kept aside.
func TestDirectWritesRefuseCollisions(t *testing.T) {
	db := openDB(t)
	a := &postgres.Applier{DB: db, RefuseCollisions: true}
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	eou := ingest.NewID()
	file := func(path string) ingest.File {
		return ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Path: path, SizeBytes: 1,
			Checksum: "xxh64:0123456789abcdef", Meta: json.RawMessage(`{}`)}
	}
	first := file("a")
	_, err := a.ApplyFiles(t.Context(), ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: []ingest.File{first}})
	require.NoError(t, err)
	_, err = a.ApplyFiles(t.Context(), ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: []ingest.File{file("b"), file("a")}})
	var pe *ingest.PermanentError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, pe.Error(), first.ID)
	p1 := ingest.NewID()
	_, err = a.ApplyPackage(t.Context(), ingest.PackageTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
		Package: ingest.Package{ID: p1, ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: "n", FileIDs: []string{first.ID}}})
	require.NoError(t, err)
	_, err = a.ApplyPackage(t.Context(), ingest.PackageTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at},
		Package: ingest.Package{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: "n"}})
	require.ErrorAs(t, err, &pe)
	var n int
	require.NoError(t, db.Get(&n, `SELECT (SELECT count(*) FROM ingest_collisions) + (SELECT count(*) FROM raw_data_files WHERE path = 'b')`))
	require.Zero(t, n, "refused writes leave nothing behind")
}
