package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/postgres"
)

func openDB(t *testing.T) *sqlx.DB {
	t.Helper()
	db, err := database.Open(testenv.Database(t), 4)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func seedObsUnit(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	var src, prog, ou int64
	require.NoError(t, db.QueryRow(`INSERT INTO sources (name, kind, ra_deg, dec_deg) VALUES ('s', 'fixed', 1, 2) RETURNING id`).Scan(&src))
	require.NoError(t, db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi) VALUES ('p', 't', 'pi') RETURNING id`).Scan(&prog))
	require.NoError(t, db.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, 'u', $2, 11, 60) RETURNING id`, prog, src).Scan(&ou))
	return ou
}

// snapshot is the content of the ingest tables, without the columns that say when a row was
// written.
func snapshot(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT coalesce(json_agg(x ORDER BY x.id), '[]')::text FROM (SELECT id, obs_unit_id, instrument_module_id, site, status, start_time, end_time, start_meta, finish_meta, start_tx, finish_tx FROM executed_obs_units) x`,
		`SELECT coalesce(json_agg(x ORDER BY x.id), '[]')::text FROM (SELECT id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum, meta, tx, created_at FROM raw_data_files) x`,
		`SELECT coalesce(json_agg(x ORDER BY x.id), '[]')::text FROM (SELECT id, executed_obs_unit_id, instrument_module_id, name, status, tx FROM raw_data_packages) x`,
		`SELECT coalesce(json_agg(x ORDER BY x.file_id), '[]')::text FROM (SELECT file_id, package_id FROM raw_data_package_files) x`,
		`SELECT coalesce(json_agg(x ORDER BY x.record_id), '[]')::text FROM (SELECT kind, record_id, other_id FROM ingest_collisions) x`,
	} {
		var s string
		require.NoError(t, db.QueryRow(q).Scan(&s))
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// TestApplyIsIdempotentAndOrderIndependent applies one observation's tasks (start, finish, a
// single file, a bulk, a package naming files) in many shuffled orders, each task three times
// (a finish before its start, files before their package): the rows are always the same.
func TestApplyIsIdempotentAndOrderIndependent(t *testing.T) {
	db := openDB(t)
	ou := seedObsUnit(t, db)
	a := &postgres.Applier{DB: db, BatchRows: 2} // small batches: the bulk spans several
	at := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	eou, pkg := ingest.NewID(), ingest.NewID()
	file := func(path string) ingest.File {
		return ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Path: path, SizeBytes: 5,
			Checksum: "xxh64:0123456789abcdef", Meta: json.RawMessage(`{"k":1}`)}
	}
	single := file("a")
	bulk := []ingest.File{file("b"), file("c"), file("d"), file("e"), file("f")}
	bulk[4].RawDataPackageID = pkg
	tasks := []func(context.Context) error{
		func(ctx context.Context) error {
			_, err := a.ApplyStart(ctx, ingest.StartTask{Envelope: ingest.Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-000000000001", AcceptedAt: at}, Start: ingest.Start{
				ID: eou, ObsUnitID: ou, InstrumentModuleID: 11, StartTime: at, Site: "FYST", Meta: json.RawMessage(`{"a":1}`)}})
			return err
		},
		func(ctx context.Context) error {
			_, err := a.ApplyFinish(ctx, ingest.FinishTask{Envelope: ingest.Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-000000000002", AcceptedAt: at}, ID: eou, Finish: ingest.Finish{
				EndTime: at.Add(time.Hour), Status: ingest.StatusAborted, Meta: json.RawMessage(`{"b":2}`)}})
			return err
		},
		func(ctx context.Context) error {
			_, err := a.ApplyFiles(ctx, ingest.FilesTask{Envelope: ingest.Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-000000000003", AcceptedAt: at}, Files: []ingest.File{single}})
			return err
		},
		func(ctx context.Context) error {
			_, err := a.ApplyFiles(ctx, ingest.FilesTask{Envelope: ingest.Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-000000000004", AcceptedAt: at}, Files: bulk})
			return err
		},
		func(ctx context.Context) error {
			_, err := a.ApplyPackage(ctx, ingest.PackageTask{Envelope: ingest.Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-000000000005", AcceptedAt: at}, Package: ingest.Package{
				ID: pkg, ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: "p", FileIDs: []string{single.ID, bulk[0].ID}}})
			return err
		},
	}
	var want string
	store := &postgres.Store{DB: db, Status: ingest.Committed}
	for round := range 12 {
		_, err := db.Exec(`TRUNCATE executed_obs_units, raw_data_files, raw_data_packages, raw_data_package_files, ingest_collisions`)
		require.NoError(t, err)
		var order []int
		for i := range tasks {
			order = append(order, i, i, i)
		}
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		if round == 0 { // finish, files and package before the start, at least once
			order = []int{1, 4, 2, 3, 0, 1, 4, 2, 3, 0, 0, 1, 2, 3, 4}
		}
		for _, i := range order {
			require.NoError(t, tasks[i](t.Context()))
		}
		got := snapshot(t, db)
		if round == 0 {
			want = got
			require.Contains(t, got, `"status":"aborted"`)
			require.Contains(t, got, `"obs_unit_id":`)
		}
		require.Equal(t, want, got, "round %d, order %v", round, order)
		// Package membership is stored once whichever side writes it: 3 files (two named by it,
		// one naming it), and nothing collided.
		require.True(t, strings.HasSuffix(got, "\n[]"), "no collision: %s", got)
		files, err := store.PackageFiles(t.Context(), pkg, 100)
		require.NoError(t, err)
		require.Len(t, files, 3)
	}
	e, finished, err := store.ExecutedObsUnit(t.Context(), eou)
	require.NoError(t, err)
	require.True(t, finished)
	require.Equal(t, ingest.StatusAborted, e.Status)
	require.JSONEq(t, `{"a":1,"b":2}`, string(e.Meta))
}

// A batch whose files are partly registered already (a retry of some of them with new ones):
// the plain insert meets the registered file, and the batch, applied again as upserts, registers
// the new ones and leaves the registered one as it was — alone, and inside a shared transaction.
func TestApplyFilesPartlyRegistered(t *testing.T) {
	db := openDB(t)
	a := &postgres.Applier{DB: db, BatchRows: 2}
	at := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	eou := ingest.NewID()
	file := func(path string, size int64) ingest.File {
		return ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11, Path: path, SizeBytes: size,
			Checksum: "xxh64:0123456789abcdef", Meta: json.RawMessage(`{}`)}
	}
	task := func(files ...ingest.File) ingest.FilesTask {
		return ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: files}
	}
	old := file("old", 1)
	_, err := a.ApplyFiles(t.Context(), task(old))
	require.NoError(t, err)
	changed := old
	changed.SizeBytes = 99 // a registered file is left as it is
	newAlone, newInBatch := file("alone", 2), file("batch", 3)
	_, err = a.ApplyFiles(t.Context(), task(changed, newAlone))
	require.NoError(t, err)
	other, mixed := task(file("other", 4)), task(newInBatch, changed)
	_, err = a.ApplyBatch(t.Context(), []postgres.Work{{Files: &other}, {Files: &mixed}})
	require.NoError(t, err)
	// The files of several tasks within one statement's rows (a round's registrations) are one
	// statement committing by itself; one of them already registered makes it an upsert too.
	wide := &postgres.Applier{DB: db, BatchRows: 10}
	fifth, again := task(file("fifth", 5)), task(changed)
	c, err := wide.ApplyBatch(t.Context(), []postgres.Work{{Files: &fifth}, {Files: &again}})
	require.NoError(t, err)
	require.NotEmpty(t, c.LSN)
	var sizes []int64
	require.NoError(t, db.Select(&sizes, `SELECT size_bytes FROM raw_data_files WHERE executed_obs_unit_id = $1 ORDER BY size_bytes`, eou))
	require.Equal(t, []int64{1, 2, 3, 4, 5}, sizes)
	var tx string
	require.NoError(t, db.Get(&tx, `SELECT tx FROM raw_data_files WHERE path = 'fifth'`))
	require.Equal(t, fifth.TxID, tx, "each row keeps its own task's transaction")
}

// TestApplyClassifiesErrors: a start whose obs unit does not exist can never apply (permanent);
// an unreachable database is not permanent.
func TestApplyClassifiesErrors(t *testing.T) {
	db := openDB(t)
	a := &postgres.Applier{DB: db}
	_, err := a.ApplyStart(t.Context(), ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{
		ID: ingest.NewID(), ObsUnitID: 424242, StartTime: time.Now(), Site: "x", Meta: json.RawMessage(`{}`)}})
	var pe *ingest.PermanentError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "23503")

	dead, err := database.Open("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", 1)
	require.NoError(t, err)
	defer dead.Close()
	_, err = (&postgres.Applier{DB: dead}).ApplyFiles(t.Context(), ingest.FilesTask{Files: []ingest.File{{ID: ingest.NewID()}}})
	require.Error(t, err)
	require.False(t, errors.As(err, &pe), "an outage is not permanent: %v", err)
}

// TestProgramWithExecutionsCannotBeDeleted checks the schema contract the catalog's 409 rests
// on: deleting a program (cascading to its obs units) that has executed observations fails with
// SQLSTATE 23503, while one without executions is deleted.
// The route-level 409 is TestCatalogRefusesDeletingProgramWithExecutions (ingest package).
func TestProgramWithExecutionsCannotBeDeleted(t *testing.T) {
	db := openDB(t)
	ou := seedObsUnit(t, db)
	_, err := (&postgres.Applier{DB: db}).ApplyStart(t.Context(), ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()},
		Start: ingest.Start{ID: ingest.NewID(), ObsUnitID: ou, StartTime: time.Now(), Site: "FYST", Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM observing_programs WHERE short_name = 'p'`)
	require.Error(t, err)
	require.Contains(t, err.Error(), "23503")
	_, err = db.Exec(`TRUNCATE executed_obs_units`)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM observing_programs WHERE short_name = 'p'`)
	require.NoError(t, err)
}

// TestOrphans: records whose linked record has not arrived are reported by kind, and no longer
// once it has.
func TestOrphans(t *testing.T) {
	db := openDB(t)
	ou := seedObsUnit(t, db)
	a := &postgres.Applier{DB: db}
	store := &postgres.Store{DB: db}
	eou, pkg := ingest.NewID(), ingest.NewID()
	at := time.Now().UTC()
	_, err := a.ApplyFinish(t.Context(), ingest.FinishTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, ID: eou,
		Finish: ingest.Finish{EndTime: at, Status: ingest.StatusCompleted, Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	f := ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: ingest.NewID(), InstrumentModuleID: 11, Path: "x", Checksum: "xxh64:0123456789abcdef",
		RawDataPackageID: pkg, Meta: json.RawMessage(`{}`)}
	_, err = a.ApplyFiles(t.Context(), ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, Files: []ingest.File{f}})
	require.NoError(t, err)
	got, err := store.Orphans(t.Context(), 10)
	require.NoError(t, err)
	kinds := map[string]string{}
	for _, o := range got {
		kinds[o.Kind] = o.ID
	}
	require.Equal(t, map[string]string{"finish_without_start": eou, "file_without_execution": f.ID, "file_without_package": f.ID}, kinds)

	_, err = a.ApplyStart(t.Context(), ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{ID: eou, ObsUnitID: ou, StartTime: at, Site: "FYST", Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = a.ApplyPackage(t.Context(), ingest.PackageTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Package: ingest.Package{ID: pkg, ExecutedObsUnitID: eou, InstrumentModuleID: 11, Name: "p"}})
	require.NoError(t, err)
	got, err = store.Orphans(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "%+v", got)
	require.Equal(t, "file_without_execution", got[0].Kind)
}

// TestChecksumCheck: the table's own CHECK on checksums (migration 00015, cheaper than 00007's)
// accepts exactly the two formats the API accepts — "sha256:" and 64, or "xxh64:" and 16,
// lower-case hex digits — and refuses everything else, as 00007's did.
func TestChecksumCheck(t *testing.T) {
	db := openDB(t)
	insert := func(sum string) error {
		_, err := db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
VALUES ($1, $2, 11, $4, 1, $3)`, ingest.NewID(), ingest.NewID(), sum, ingest.NewID())
		return err
	}
	hex := func(n int) string { return strings.Repeat("0123456789abcdef", 8)[:n] }
	for _, sum := range []string{"sha256:" + hex(64), "xxh64:" + hex(16)} {
		require.NoError(t, insert(sum), sum)
	}
	for _, sum := range []string{
		"sha256:" + hex(63), "sha256:" + hex(65), "sha256:" + hex(63) + "g", "sha256:" + hex(63) + "A",
		"xxh64:" + hex(15), "xxh64:" + hex(17), "xxh64:" + hex(64), "sha256:" + hex(16),
		"xxh64:" + hex(16) + "\n", "sha256:" + hex(64) + "\n", "md5:" + hex(32), "", "SHA256:" + hex(64),
	} {
		var pe *pq.Error
		require.ErrorAs(t, insert(sum), &pe, "%q", sum)
		require.Equal(t, "raw_data_files_checksum_check", pe.Constraint, "%q", sum)
	}
}
