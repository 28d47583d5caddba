// Package postgres is ingest's PostgreSQL side: the worker's idempotent, order-independent
// application of buffered writes to the main database, the API's reference checks and reads, and
// the two direct writes (file update, package finalize).
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/groupcommit"
	"github.com/obsops/obsops/services/ingest"
)

// Applier applies tasks to the main database. Every statement is an upsert keyed by the record's
// id, so a task applied twice, or tasks applied in any order (a finish before its start, files
// before their package), end in the same rows.
type Applier struct {
	DB *sqlx.DB
	// BatchRows is the most files one INSERT carries (a bulk task is split into such batches, in
	// one transaction).
	BatchRows int
	// RefuseCollisions: a write that collides (a path, file or package name another record holds)
	// fails, rolled back, instead of being kept in ingest_collisions — for the API's direct writes
	// (buffering disabled), which answer only once applied; the worker leaves it false.
	RefuseCollisions bool

	newFilesStmt    atomic.Pointer[sqlx.Stmt] // insertFilesSQL, prepared on first use
	bareFilesStmt   atomic.Pointer[sqlx.Stmt] // insertBareFilesSQL, prepared on first use
	upsertFilesStmt atomic.Pointer[sqlx.Stmt] // upsertFilesSQL, prepared on first use
	collisionsStmt  atomic.Pointer[sqlx.Stmt] // fileCollisionsSQL, likewise
	lsn             groupcommit.Group[walPosition]
}

// classify marks integrity and data errors (which no retry can fix) as permanent; everything
// else (connection failures, shutdowns, serialization failures) stays transient.
func classify(err error) error {
	var pe *pq.Error
	if errors.As(err, &pe) {
		switch pe.Code.Class() {
		case "22", "23": // data exception, integrity constraint violation
			return &ingest.PermanentError{Err: fmt.Errorf("%s (SQLSTATE %s)", pe.Message, pe.Code)}
		}
	}
	return err
}

func (a *Applier) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) (ingest.Commit, error) {
	if err := database.InTx(ctx, a.DB, fn); err != nil {
		return ingest.Commit{}, classify(err)
	}
	return a.committed(ctx), nil
}

// alone runs fn, one statement outside any transaction block, so it commits by itself
// (PostgreSQL commits a single statement atomically): the same outcome as inTx in one round trip
// instead of three (BEGIN, the statement, COMMIT) — most tasks are one statement, a single file's
// registration.
func (a *Applier) alone(ctx context.Context, fn func() error) (ingest.Commit, error) {
	if err := fn(); err != nil {
		return ingest.Commit{}, classify(err)
	}
	return a.committed(ctx), nil
}

// committed is the Commit of a transaction that just committed.
func (a *Applier) committed(ctx context.Context) ingest.Commit {
	// After COMMIT returned, the commit record is flushed: the WAL position read now is at or
	// beyond it (what a replica must have replayed before the cache entry may go). "" if the read
	// failed: committed all the same, the receipt just lacks the position.
	return ingest.Commit{At: time.Now().UTC(), LSN: a.lsnAfter(ctx)}
}

// walPosition is one read of the WAL position ("" if it failed), shared as a group commit
// (groupcommit.Group) by the tasks that committed at about the same time: a task joins the next
// read, which starts only once the read in flight (if any) has returned — so every read starts
// after the commit of each task sharing it, and its position is at or beyond all their commit
// records. With many tasks in flight, one read serves several commits instead of one round trip
// (and one query for PostgreSQL) per task.
type walPosition struct{ lsn string }

// lsnAfter returns a WAL position read after the caller's commit ("" if the read failed).
func (a *Applier) lsnAfter(ctx context.Context) string {
	w, err := a.lsn.Join(ctx, nil, func(w *walPosition) error {
		rctx, cancel := context.WithTimeout(context.Background(), lsnTimeout)
		defer cancel()
		if err := a.DB.QueryRowContext(rctx, `SELECT pg_current_wal_lsn()::text`).Scan(&w.lsn); err != nil {
			w.lsn = ""
		}
		return nil
	})
	if err != nil {
		return ""
	}
	return w.lsn
}

// lsnTimeout bounds one read of the WAL position.
const lsnTimeout = 10 * time.Second

// ApplyStart records the start of an execution. A finish applied earlier keeps its status; a
// start applied twice changes nothing. A start after its finish's end_time (both acknowledged:
// the finish before its start was known, see execFinish) is stored all the same, the execution
// flagged inconsistent: never a dead letter for an acknowledged write, never a silent
// contradiction (executed_obs_units_ends_after_start admits only flagged rows).
func (a *Applier) ApplyStart(ctx context.Context, t ingest.StartTask) (ingest.Commit, error) {
	return a.ApplyBatch(ctx, []Work{{Start: &t}})
}

func execStart(ctx context.Context, q sqlx.ExecerContext, t ingest.StartTask) error {
	s := t.Start
	_, err := q.ExecContext(ctx, `
INSERT INTO executed_obs_units (id, obs_unit_id, instrument_module_id, site, start_time, start_meta, start_tx)
VALUES ($1, $2, NULLIF($3, 0), $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET obs_unit_id = EXCLUDED.obs_unit_id, instrument_module_id = EXCLUDED.instrument_module_id,
    site = EXCLUDED.site, start_time = EXCLUDED.start_time, start_meta = EXCLUDED.start_meta, start_tx = EXCLUDED.start_tx,
    inconsistent = CASE WHEN executed_obs_units.end_time < EXCLUDED.start_time
        THEN 'start_time ' || EXCLUDED.start_time || ' (start applied after the finish) is after end_time ' || executed_obs_units.end_time
        ELSE executed_obs_units.inconsistent END
WHERE executed_obs_units.start_tx IS NULL`,
		s.ID, s.ObsUnitID, s.InstrumentModuleID, s.Site, s.StartTime, []byte(s.Meta), t.TxID)
	return err
}

// ApplyFinish records the end of an execution, before or after its start. The API refuses a
// finish ending before a start it knows of (ingest.endsAfterStart); one it could not know of (a
// start acknowledged at another site, whose buffer is separate) is stored flagged inconsistent,
// like a late start (ApplyStart).
func (a *Applier) ApplyFinish(ctx context.Context, t ingest.FinishTask) (ingest.Commit, error) {
	return a.ApplyBatch(ctx, []Work{{Finish: &t}})
}

func execFinish(ctx context.Context, q sqlx.ExecerContext, t ingest.FinishTask) error {
	f := t.Finish
	_, err := q.ExecContext(ctx, `
INSERT INTO executed_obs_units (id, status, end_time, finish_meta, finish_tx)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, end_time = EXCLUDED.end_time,
    finish_meta = EXCLUDED.finish_meta, finish_tx = EXCLUDED.finish_tx,
    inconsistent = CASE WHEN EXCLUDED.end_time < executed_obs_units.start_time
        THEN 'end_time ' || EXCLUDED.end_time || ' (finish applied after the start) is before start_time ' || executed_obs_units.start_time
        ELSE executed_obs_units.inconsistent END
WHERE executed_obs_units.finish_tx IS NULL`,
		t.ID, f.Status, f.EndTime, []byte(f.Meta), t.TxID)
	return err
}

// insertFilesSQL is the batched registration: one statement per batch, arrays unnested. One
// statement can hold the files of several tasks (the worker's batches, see ApplyBatch): $9 and
// $10 list each task's transaction and acceptance time once, and every row names its task's
// position in them (an int per row costs less to parse than a uuid and a timestamp per row).
// The same statement records the package of each file that names one (raw_data_package_files,
// membership stored once: migration 00018).
//
// It is tried first as plain INSERTs: files are nearly always new, and ON CONFLICT's speculative
// insertion cost PostgreSQL ~12% more per row. Only when a file, its path or its membership is
// already there (a task applied again after a crash, a retry of registered files, a collision)
// does the batch run again as upsertFilesSQL (see ApplyBatch).
const insertFilesSQL = filesCTE + `
ins AS (` + insertFilesRows + `)
INSERT INTO raw_data_package_files (file_id, package_id) SELECT id, pkg FROM f WHERE pkg IS NOT NULL`

// insertBareFilesSQL is insertFilesSQL for a batch in which no file names a package (nearly
// all): the rows go straight from unnest into the table, without the CTE the membership needs
// (which PostgreSQL would materialize).
const insertBareFilesSQL = `
INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum, meta, tx, created_at)
SELECT id, eou, module, path, size, checksum, meta::jsonb, ($9::uuid[])[task],
       COALESCE(NULLIF(created, '')::timestamptz, ($10::timestamptz[])[task])
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $11::text[], $12::int[])
     AS u(id, eou, module, path, size, checksum, pkg, meta, created, task)`

// filesCTE is the unnested rows of a files batch (f); filesCTEDistinct once per id (a task
// applied twice in one batch), for the upsert.
const (
	filesUnnest = `
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $11::text[], $12::int[])
     AS u(id, eou, module, path, size, checksum, pkg, meta, created, task)),`
	filesCTE         = "\nWITH f AS (SELECT id, eou, module, path, size, checksum, NULLIF(pkg, '')::uuid AS pkg, meta, created, task" + filesUnnest
	filesCTEDistinct = "\nWITH f AS (SELECT DISTINCT ON (id) id, eou, module, path, size, checksum, NULLIF(pkg, '')::uuid AS pkg, meta, created, task" + filesUnnest
)

// insertFilesRows inserts the rows of filesCTE.
const insertFilesRows = `INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum, meta, tx, created_at)
SELECT id, eou, module, path, size, checksum, meta::jsonb, ($9::uuid[])[task],
       COALESCE(NULLIF(created, '')::timestamptz, ($10::timestamptz[])[task])
FROM f`

// upsertFilesSQL is insertFilesSQL leaving files already registered as they are;
// fileCollisionsSQL, run next in the same transaction, then records in ingest_collisions (instead
// of failing the batch into the dead letters) a file whose path on its module is another file's,
// or whose package differs from the one the file already belongs to. The API refuses both when it
// acknowledges a registration (409); only writes acknowledged by two sites' separate buffers can
// still collide here, and an acknowledged write is kept (the losing record in full) rather than
// refused later (docs/decisions.md). Two statements, because a statement sees the rows committed
// when it began: an insert that waited for another transaction applying the same files (a task
// run twice at once) would not see them, and took its own files for lost; the second statement
// begins after that wait and sees them.
const upsertFilesSQL = filesCTEDistinct + `
ins AS (` + insertFilesRows + `
ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO raw_data_package_files (file_id, package_id)
SELECT id, pkg FROM f
WHERE pkg IS NOT NULL AND (id IN (SELECT id FROM ins) OR EXISTS (SELECT 1 FROM raw_data_files e WHERE e.id = f.id))
ON CONFLICT (file_id) DO NOTHING`

// fileCollisionsSQL records the files of a batch that upsertFilesSQL could not store as written
// (see there); $10 is unused but keeps the arguments those of the other files statements.
const fileCollisionsSQL = filesCTEDistinct + `
lost AS (SELECT f.*, (SELECT e.id FROM raw_data_files e WHERE e.instrument_module_id = f.module AND e.path = f.path) AS holder
         FROM f WHERE NOT EXISTS (SELECT 1 FROM raw_data_files e WHERE e.id = f.id) AND $10::timestamptz[] IS NOT NULL),
memlost AS (SELECT f.id, f.pkg, f.task, m.package_id AS holder FROM f JOIN raw_data_package_files m ON m.file_id = f.id
            WHERE f.pkg IS NOT NULL AND m.package_id <> f.pkg)
INSERT INTO ingest_collisions (kind, record_id, other_id, tx, detail, record)
SELECT 'file_path', id, holder, ($9::uuid[])[task],
       'path ' || path || ' on instrument module ' || module || ' is registered as file ' || COALESCE(holder::text, 'of the same batch'),
       jsonb_build_object('id', id, 'executed_obs_unit_id', eou, 'instrument_module_id', module, 'path', path, 'size_bytes', size,
                          'checksum', checksum, 'raw_data_package_id', pkg, 'meta', meta::jsonb, 'created_at', NULLIF(created, ''))
FROM lost
UNION ALL
SELECT 'file_package', id, holder, ($9::uuid[])[task], 'file ' || id || ' names package ' || pkg || ' but belongs to package ' || holder, NULL
FROM memlost`

// errFileExists says a plain insertFilesSQL met a file already registered: the batch is run
// again with upsertFilesSQL.
var errFileExists = errors.New("a file of the batch is already registered")

// ApplyFiles registers files in batches of BatchRows rows, all in one transaction; files
// already registered are left as they are.
func (a *Applier) ApplyFiles(ctx context.Context, t ingest.FilesTask) (ingest.Commit, error) {
	return a.ApplyBatch(ctx, []Work{{Files: &t}})
}

// filesExec runs insertFilesSQL with its arguments: prepared (Applier.filesExec) or not (plainFilesExec).
type filesExec func(ctx context.Context, args ...any) (sql.Result, error)

// plainFilesExec runs upsertFilesSQL unprepared on q (the API's rare direct writes).
func plainFilesExec(q sqlx.ExecerContext) filesExec {
	return func(ctx context.Context, args ...any) (sql.Result, error) {
		res, err := q.ExecContext(ctx, upsertFilesSQL, args...)
		if err != nil {
			return res, err
		}
		_, err = q.ExecContext(ctx, fileCollisionsSQL, args...)
		return res, err
	}
}

// filesExec is insertFilesSQL (upsert: upsertFilesSQL) prepared, on tx (or, with tx nil, on the
// pool). The plain insert answers errFileExists when a file is already registered.
func (a *Applier) filesExec(ctx context.Context, tx *sqlx.Tx, upsert bool) (filesExec, error) {
	query, stmt := insertFilesSQL, &a.newFilesStmt
	if upsert {
		query, stmt = upsertFilesSQL, &a.upsertFilesStmt
	}
	st, err := a.preparedOn(ctx, tx, stmt, query)
	if err != nil {
		return nil, err
	}
	if upsert {
		coll, err := a.preparedOn(ctx, tx, &a.collisionsStmt, fileCollisionsSQL)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, args ...any) (sql.Result, error) {
			res, err := st.ExecContext(ctx, args...)
			if err != nil {
				return res, err
			}
			_, err = coll.ExecContext(ctx, args...)
			return res, err
		}, nil
	}
	bare, err := a.preparedOn(ctx, tx, &a.bareFilesStmt, insertBareFilesSQL)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, args ...any) (sql.Result, error) {
		run := bare
		if pkgs, _ := args[6].(pq.StringArray); slices.ContainsFunc(pkgs, func(p string) bool { return p != "" }) {
			run = st
		}
		res, err := run.ExecContext(ctx, args...)
		var pe *pq.Error
		if errors.As(err, &pe) && pe.Code == "23505" { // a file, its path or its membership already there
			return nil, errFileExists
		}
		return res, err
	}, nil
}

// insertFiles writes the files of tasks with one INSERT per batch rows (5,000 if batch ≤ 0).
func insertFiles(ctx context.Context, exec filesExec, tasks []ingest.FilesTask, batch int) error {
	if batch <= 0 {
		batch = 5000
	}
	var rows fileRows
	for _, t := range tasks {
		for _, f := range t.Files {
			rows.add(f, t.TxID, t.AcceptedAt)
			if len(rows.ids) == batch {
				if err := rows.insert(ctx, exec); err != nil {
					return err
				}
				rows = fileRows{}
			}
		}
	}
	if len(rows.ids) == 0 {
		return nil
	}
	return rows.insert(ctx, exec)
}

// batchRows is BatchRows, 5,000 if unset.
func (a *Applier) batchRows() int {
	if a.BatchRows <= 0 {
		return 5000
	}
	return a.BatchRows
}

// prepared is query prepared once in *stmt: lib/pq runs a query with arguments as two round
// trips (parse and plan, then execute), a prepared one as one, without parsing or planning again —
// what a single file's registration cost PostgreSQL most of.
func (a *Applier) prepared(ctx context.Context, stmt *atomic.Pointer[sqlx.Stmt], query string) (*sqlx.Stmt, error) {
	return prepared(ctx, a.DB, stmt, query)
}

// preparedOn is Applier.prepared on tx (the connection's prepared copy, made once per
// connection), or on the pool when tx is nil.
func (a *Applier) preparedOn(ctx context.Context, tx *sqlx.Tx, stmt *atomic.Pointer[sqlx.Stmt], query string) (*sqlx.Stmt, error) {
	st, err := a.prepared(ctx, stmt, query)
	if err != nil || tx == nil {
		return st, err
	}
	return tx.StmtxContext(ctx, st), nil
}

// prepared returns the statement in stmt, preparing query on db the first time: a statement
// run often is planned once per connection (PostgreSQL then keeps a generic plan), where an
// unprepared one is planned every time — for the registration checks' lookup, planning took
// four times as long as running it.
func prepared(ctx context.Context, db *sqlx.DB, stmt *atomic.Pointer[sqlx.Stmt], query string) (*sqlx.Stmt, error) {
	if st := stmt.Load(); st != nil {
		return st, nil
	}
	st, err := db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if !stmt.CompareAndSwap(nil, st) {
		_ = st.Close()
	}
	return stmt.Load(), nil
}

// fileRows are the columns of one INSERT … SELECT unnest.
type fileRows struct {
	ids, eous, paths, checksums, pkgs, metas, created []string
	modules, sizes, task                              []int64
	txs, accepted                                     []string // per task (1-based positions in task)
}

func (r *fileRows) add(f ingest.File, tx string, at time.Time) {
	if n := len(r.txs); n == 0 || r.txs[n-1] != tx {
		r.txs, r.accepted = append(r.txs, tx), append(r.accepted, at.Format(time.RFC3339Nano))
	}
	created := ""
	if f.CreatedAt != nil {
		created = f.CreatedAt.Format(time.RFC3339Nano)
	}
	r.ids, r.eous, r.modules, r.paths = append(r.ids, f.ID), append(r.eous, f.ExecutedObsUnitID), append(r.modules, f.InstrumentModuleID), append(r.paths, f.Path)
	r.sizes, r.checksums, r.pkgs, r.metas = append(r.sizes, f.SizeBytes), append(r.checksums, f.Checksum), append(r.pkgs, f.RawDataPackageID), append(r.metas, string(f.Meta))
	r.created, r.task = append(r.created, created), append(r.task, int64(len(r.txs)))
}

func (r *fileRows) insert(ctx context.Context, exec filesExec) error {
	_, err := exec(ctx, pq.StringArray(r.ids), pq.StringArray(r.eous), pq.Int64Array(r.modules),
		pq.StringArray(r.paths), pq.Int64Array(r.sizes), pq.StringArray(r.checksums), pq.StringArray(r.pkgs), pq.StringArray(r.metas),
		pq.StringArray(r.txs), pq.StringArray(r.accepted), pq.StringArray(r.created), pq.Int64Array(r.task))
	return err
}

// ApplyPackage creates a package; created twice (or first by a finalize) it stays as it is.
func (a *Applier) ApplyPackage(ctx context.Context, t ingest.PackageTask) (ingest.Commit, error) {
	return a.ApplyBatch(ctx, []Work{{Package: &t}})
}

// insertPackage creates a package and records its files as its members; a package whose name its
// execution already gives another package, or a file that already belongs to another package, is
// then recorded in ingest_collisions rather than failing the task: the API refuses both at
// acknowledgement (409), so only writes acknowledged by two sites' separate buffers meet here, and
// an acknowledged write is never turned into a dead letter by them (docs/decisions.md). Two
// statements for the reason upsertFilesSQL gives: the second sees a package another transaction
// applying the same task committed while the first waited for it (no collision with itself).
func insertPackage(ctx context.Context, q sqlx.ExecerContext, p ingest.Package, txID string) error {
	ids := p.FileIDs
	if ids == nil {
		ids = []string{}
	}
	args := []any{p.ID, p.ExecutedObsUnitID, p.InstrumentModuleID, p.Name, pq.StringArray(ids), txID}
	if _, err := q.ExecContext(ctx, `
WITH p AS (INSERT INTO raw_data_packages (id, executed_obs_unit_id, instrument_module_id, name, tx)
           VALUES ($1::uuid, $2::uuid, $3::int, $4::text, $6::uuid) ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO raw_data_package_files (file_id, package_id)
SELECT x, $1::uuid FROM unnest($5::uuid[]) AS x
WHERE EXISTS (SELECT 1 FROM p) OR EXISTS (SELECT 1 FROM raw_data_packages WHERE id = $1::uuid)
ON CONFLICT (file_id) DO NOTHING`, args...); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, `
WITH ok AS (SELECT id FROM raw_data_packages WHERE id = $1::uuid)
INSERT INTO ingest_collisions (kind, record_id, other_id, tx, detail, record)
SELECT 'package_name', $1::uuid, (SELECT r.id FROM raw_data_packages r WHERE r.executed_obs_unit_id = $2::uuid AND r.name = $4::text),
       $6::uuid, 'execution ' || $2::text || ' already has a package named ' || quote_literal($4::text),
       jsonb_build_object('id', $1::uuid, 'executed_obs_unit_id', $2::uuid, 'instrument_module_id', $3::int, 'name', $4::text, 'file_ids', $5::uuid[])
WHERE NOT EXISTS (SELECT 1 FROM ok)
UNION ALL
SELECT 'package_file', $1::uuid, m.package_id, $6::uuid, 'file ' || x || ' already belongs to package ' || m.package_id, NULL
FROM unnest($5::uuid[]) AS x JOIN raw_data_package_files m ON m.file_id = x
WHERE m.package_id <> $1::uuid AND EXISTS (SELECT 1 FROM ok)`, args...)
	return err
}

// IsNoRows reports a missing row.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// IntegrityCounts are the rows the worker stored flagged rather than refuse an acknowledged write:
// executions whose start and finish contradict each other (executed_obs_units.inconsistent), and
// records that lost a path, file or package name to another (ingest_collisions). Both are zero in
// a consistent database; each row is listed by migrations/invariants.
type IntegrityCounts struct {
	InconsistentExecutions int64 `db:"inconsistent"`
	Collisions             int64 `db:"collisions"`
}

// Integrity counts them (a partial index and a table empty when all is well: cheap).
func (a *Applier) Integrity(ctx context.Context) (IntegrityCounts, error) {
	var c IntegrityCounts
	err := a.DB.GetContext(ctx, &c, `SELECT (SELECT count(*) FROM executed_obs_units WHERE inconsistent IS NOT NULL) AS inconsistent,
    (SELECT count(*) FROM ingest_collisions) AS collisions`)
	return c, err
}
