package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/groupcommit"
	"github.com/obsops/obsops/services/ingest"
)

// Store is the API's view of the database (at a secondary site, the local replica): reference
// checks, reads, and the two direct writes.
type Store struct {
	DB *sqlx.DB
	// Write, when set, takes the two direct writes (finalize, file update): the main site's
	// primary (database.Pools.Write; a secondary's replica refuses writes). Unset: DB.
	Write *sqlx.DB
	// Status is what rows read here are reported as: committed (main) or replicated (secondary).
	Status string

	modMu     sync.Mutex
	modules   map[int64]bool
	modLoaded time.Time

	lookups    [lookupLanes]lookupLane   // FilesByIDOrPath's shared queries
	lanes      int                       // lanes in use (0: lookupLanes; tests compare with 1)
	byIDOrPath atomic.Pointer[sqlx.Stmt] // filesByIDOrPathSQL, prepared on first use
	byPath     atomic.Pointer[sqlx.Stmt] // filesByPathSQL, prepared on first use
}

// lookupLane is one sequence of shared file lookups: one query in flight, the next gathering.
type lookupLane struct {
	group groupcommit.Group[fileLookup]
	busy  atomic.Bool // a query of this lane is in flight
}

// writer is the pool for the direct writes (see Write).
func (s *Store) writer() *sqlx.DB {
	if s.Write != nil {
		return s.Write
	}
	return s.DB
}

// ModuleExists reports whether an instrument module exists. Modules are reference data: the set
// is loaded once and reloaded at most every 10 s when an unknown id is asked for.
func (s *Store) ModuleExists(ctx context.Context, id int64) (bool, error) {
	s.modMu.Lock()
	defer s.modMu.Unlock()
	if s.modules[id] {
		return true, nil
	}
	if s.modules != nil && time.Since(s.modLoaded) < 10*time.Second {
		return false, nil
	}
	var ids []int64
	if err := s.DB.SelectContext(ctx, &ids, `SELECT id FROM instrument_modules`); err != nil {
		return false, err
	}
	s.modules = make(map[int64]bool, len(ids))
	for _, m := range ids {
		s.modules[m] = true
	}
	s.modLoaded = time.Now()
	return s.modules[id], nil
}

// ModuleAllowed reports whether module belongs to the instrument of obsUnit's planned module
// (ingest.Store).
func (s *Store) ModuleAllowed(ctx context.Context, obsUnit, module int64) (bool, error) {
	var ok bool
	err := s.DB.QueryRowContext(ctx, `SELECT EXISTS (
		SELECT 1 FROM obs_units ou
		JOIN instrument_modules planned ON planned.id = ou.instrument_module_id
		JOIN instrument_modules m ON m.instrument_id = planned.instrument_id
		WHERE ou.id = $1 AND m.id = $2)`, obsUnit, module).Scan(&ok)
	return ok, err
}

// ObsUnitExists reports whether a planned obs unit exists.
func (s *Store) ObsUnitExists(ctx context.Context, id int64) (bool, error) {
	var ok bool
	err := s.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM obs_units WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}

// ExistingIDs returns which of ids have a row in table (executed_obs_units, raw_data_files,
// raw_data_packages).
func (s *Store) ExistingIDs(ctx context.Context, table string, ids []string) (map[string]bool, error) {
	switch table {
	case "executed_obs_units", "raw_data_files", "raw_data_packages":
	default:
		return nil, fmt.Errorf("ExistingIDs: unknown table %q", table)
	}
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	var found []string
	if err := s.DB.SelectContext(ctx, &found, `SELECT id::text FROM `+table+` WHERE id = ANY($1::uuid[])`, pq.StringArray(ids)); err != nil {
		return nil, err
	}
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// PackageInfos returns, for each of the package ids that has a row, what a file joining it is
// checked against (status, execution, module): existence, completeness and ownership in one query.
func (s *Store) PackageInfos(ctx context.Context, ids []string) (map[string]ingest.PackageInfo, error) {
	out := map[string]ingest.PackageInfo{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct {
		ID     string `db:"id"`
		Status string `db:"status"`
		EOU    string `db:"executed_obs_unit_id"`
		Module int64  `db:"instrument_module_id"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `SELECT id::text AS id, status, executed_obs_unit_id::text AS executed_obs_unit_id, instrument_module_id
FROM raw_data_packages WHERE id = ANY($1::uuid[])`, pq.StringArray(ids)); err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.ID] = ingest.PackageInfo{Status: r.Status, ExecutedObsUnitID: r.EOU, InstrumentModuleID: r.Module}
	}
	return out, nil
}

// FilesByIDOrPath returns the registered files that have one of ids or one of the (module, path)
// pairs (modules[i], paths[i]): a registration's id and path checks in one query. Small lookups
// (single registrations, small bulks) made at about the same time share one query (a group
// commit, as the buffer's rounds): under load, a registration's path check costs a fraction of a
// round trip instead of one each.
func (s *Store) FilesByIDOrPath(ctx context.Context, ids []string, modules []int64, paths []string) ([]ingest.RawDataFile, error) {
	if len(ids) == 0 && len(paths) == 0 {
		return nil, nil
	}
	if len(ids)+len(paths) > sharedLookupMax {
		return s.filesByIDOrPath(ctx, ids, modules, paths)
	}
	lanes := s.lookups[:]
	if s.lanes > 0 {
		lanes = lanes[:min(s.lanes, lookupLanes)]
	}
	lane := &lanes[0]
	for i := range lanes { // the first lane with no query in flight, else the first
		if !lanes[i].busy.Load() {
			lane = &lanes[i]
			break
		}
	}
	round, err := lane.group.Join(ctx, func(r *fileLookup) {
		r.ids = append(r.ids, ids...)
		r.modules = append(r.modules, modules...)
		r.paths = append(r.paths, paths...)
	}, func(r *fileLookup) error {
		lane.busy.Store(true)
		defer lane.busy.Store(false)
		qctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		r.rows, r.err = s.filesByIDOrPath(qctx, r.ids, r.modules, r.paths)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if round.err != nil {
		return nil, round.err
	}
	mine := make(map[string]bool, len(ids)+len(paths))
	for _, id := range ids {
		mine[id] = true
	}
	for i, p := range paths {
		mine[strconv.FormatInt(modules[i], 10)+":"+p] = true
	}
	var out []ingest.RawDataFile
	for _, r := range round.rows {
		if mine[r.ID] || mine[strconv.FormatInt(r.InstrumentModuleID, 10)+":"+r.Path] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Shared file lookups (FilesByIDOrPath): the most ids and paths one caller may bring to a shared
// query, the bound of that query, and how many shared queries may be in flight at once. With
// one, a registration arriving while a query runs waits for it to end and then for its own (1.5
// queries on average); with a second lane it starts at once when that lane is idle, so under
// load its wait is closer to one query, for about twice the (small, prepared) queries.
const (
	sharedLookupMax = 128
	lookupTimeout   = 10 * time.Second
	lookupLanes     = 2
)

// fileLookup is one shared query of FilesByIDOrPath: what its callers asked for, and every row
// found for any of them (each caller keeps its own).
type fileLookup struct {
	ids     []string
	modules []int64
	paths   []string
	rows    []ingest.RawDataFile
	err     error
}

// filesByIDOrPathSQL finds files by id ($1) or by (module, path) pairs ($2, $3).
const filesByIDOrPathSQL = `SELECT ` + fileColumns + ` FROM raw_data_files f WHERE f.id = ANY($1::uuid[])
UNION SELECT ` + fileColumns + ` FROM raw_data_files f JOIN unnest($2::int[], $3::text[]) AS q(module, path)
  ON f.instrument_module_id = q.module AND f.path = q.path`

// filesByPathSQL is filesByIDOrPathSQL without ids (a registration with server-chosen ids, the
// common case): no UNION to deduplicate, no id probe.
const filesByPathSQL = `SELECT ` + fileColumns + ` FROM raw_data_files f JOIN unnest($1::int[], $2::text[]) AS q(module, path)
  ON f.instrument_module_id = q.module AND f.path = q.path`

// filesByIDOrPath is FilesByIDOrPath's query.
func (s *Store) filesByIDOrPath(ctx context.Context, ids []string, modules []int64, paths []string) ([]ingest.RawDataFile, error) {
	var rows []fileRow
	if len(ids) == 0 {
		st, err := prepared(ctx, s.DB, &s.byPath, filesByPathSQL)
		if err != nil {
			return nil, err
		}
		if err := st.SelectContext(ctx, &rows, pq.Int64Array(modules), pq.StringArray(paths)); err != nil {
			return nil, err
		}
	} else {
		st, err := prepared(ctx, s.DB, &s.byIDOrPath, filesByIDOrPathSQL)
		if err != nil {
			return nil, err
		}
		if err := st.SelectContext(ctx, &rows, pq.StringArray(ids), pq.Int64Array(modules), pq.StringArray(paths)); err != nil {
			return nil, err
		}
	}
	out := make([]ingest.RawDataFile, len(rows))
	for i, r := range rows {
		out[i] = r.record(s.Status)
	}
	return out, nil
}

// PackagesByIDOrName returns the package with id and the one named name in execution eou (the
// same row, two rows, or none): a package creation's checks in one query.
func (s *Store) PackagesByIDOrName(ctx context.Context, id, eou, name string) ([]ingest.PackageRow, error) {
	var rows []pkgRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+pkgColumns+` FROM raw_data_packages
WHERE id = $1::uuid OR (executed_obs_unit_id = $2::uuid AND name = $3)`, zeroUUID(id), eou, name); err != nil {
		return nil, err
	}
	out := make([]ingest.PackageRow, len(rows))
	for i, r := range rows {
		out[i] = *r.row(s.Status)
	}
	return out, nil
}

// zeroUUID is id, or the nil UUID for "" (no row has it).
func zeroUUID(id string) string {
	if id == "" {
		return "00000000-0000-0000-0000-000000000000"
	}
	return id
}

type eouRow struct {
	ID          string          `db:"id"`
	ObsUnitID   sql.NullInt64   `db:"obs_unit_id"`
	ModuleID    sql.NullInt64   `db:"instrument_module_id"`
	Site        sql.NullString  `db:"site"`
	Status      string          `db:"status"`
	StartTime   sql.NullTime    `db:"start_time"`
	EndTime     sql.NullTime    `db:"end_time"`
	StartMeta   json.RawMessage `db:"start_meta"`
	FinishMeta  json.RawMessage `db:"finish_meta"`
	FinishTxSet bool            `db:"finished"`
	Flag        sql.NullString  `db:"inconsistent"`
}

func (r eouRow) record(status string) (ingest.ExecutedObsUnit, bool) {
	e := ingest.ExecutedObsUnit{ID: r.ID, Status: r.Status, Site: r.Site.String, Meta: ingest.MergeMeta(r.StartMeta, r.FinishMeta), BufferStatus: status}
	if r.ObsUnitID.Valid {
		v := r.ObsUnitID.Int64
		e.ObsUnitID = &v
	}
	if r.ModuleID.Valid {
		v := r.ModuleID.Int64
		e.InstrumentModuleID = &v
	}
	if r.StartTime.Valid {
		t := r.StartTime.Time.UTC()
		e.StartTime = &t
	}
	if r.EndTime.Valid {
		t := r.EndTime.Time.UTC()
		e.EndTime = &t
	}
	if r.Flag.Valid {
		v := r.Flag.String
		e.Inconsistent = &v
	}
	return e, r.FinishTxSet
}

const eouColumns = `id::text, obs_unit_id, instrument_module_id, site, status, start_time, end_time, start_meta, finish_meta, finish_tx IS NOT NULL AS finished, inconsistent`

// ExecutionsOf returns every committed execution of a planned obs unit (at most max), and for
// each whether its finish has been applied.
func (s *Store) ExecutionsOf(ctx context.Context, obsUnitID int64, max int) ([]ingest.ExecutedObsUnit, map[string]bool, error) {
	var rows []eouRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+eouColumns+` FROM executed_obs_units WHERE obs_unit_id = $1 ORDER BY start_time DESC, id LIMIT $2`, obsUnitID, max); err != nil {
		return nil, nil, err
	}
	out := make([]ingest.ExecutedObsUnit, len(rows))
	finished := map[string]bool{}
	for i, r := range rows {
		var f bool
		out[i], f = r.record(s.Status)
		finished[r.ID] = f
	}
	return out, finished, nil
}

// FinishedExecutions returns those of ids whose finish has been applied, by id.
func (s *Store) FinishedExecutions(ctx context.Context, ids []string) (map[string]ingest.ExecutedObsUnit, error) {
	var rows []eouRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+eouColumns+` FROM executed_obs_units WHERE id = ANY($1::uuid[]) AND finish_tx IS NOT NULL`, pq.StringArray(ids)); err != nil {
		return nil, err
	}
	out := make(map[string]ingest.ExecutedObsUnit, len(rows))
	for _, r := range rows {
		out[r.ID], _ = r.record(s.Status)
	}
	return out, nil
}

// ExecutedObsUnit returns one execution (nil when there is no row) and whether it is finished.
func (s *Store) ExecutedObsUnit(ctx context.Context, id string) (*ingest.ExecutedObsUnit, bool, error) {
	var r eouRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+eouColumns+` FROM executed_obs_units WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	e, f := r.record(s.Status)
	return &e, f, nil
}

type fileRow struct {
	ID        string          `db:"id"`
	EOU       string          `db:"executed_obs_unit_id"`
	Module    int64           `db:"instrument_module_id"`
	Path      string          `db:"path"`
	Size      int64           `db:"size_bytes"`
	Checksum  string          `db:"checksum"`
	CreatedAt time.Time       `db:"created_at"`
	Package   sql.NullString  `db:"package"`
	Meta      json.RawMessage `db:"meta"`
}

func (r fileRow) record(status string) ingest.RawDataFile {
	f := ingest.RawDataFile{ID: r.ID, ExecutedObsUnitID: r.EOU, InstrumentModuleID: r.Module, Path: r.Path,
		SizeBytes: r.Size, Checksum: r.Checksum, CreatedAt: r.CreatedAt.UTC(), Meta: r.Meta, BufferStatus: status}
	if r.Package.Valid {
		p := r.Package.String
		f.RawDataPackageID = &p
	}
	return f
}

// A file's package is its row in raw_data_package_files (membership is stored once, keyed by the
// file: migration 00018), written by whichever of the file's registration and the package's
// creation applied first.
const fileColumns = `f.id::text, f.executed_obs_unit_id::text, f.instrument_module_id, f.path, f.size_bytes, f.checksum, f.created_at,
    (SELECT m.package_id FROM raw_data_package_files m WHERE m.file_id = f.id)::text AS package, f.meta`

// File returns a registered file, or nil.
func (s *Store) File(ctx context.Context, id string) (*ingest.RawDataFile, error) {
	var r fileRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+fileColumns+` FROM raw_data_files f WHERE f.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := r.record(s.Status)
	return &f, nil
}

type pkgRow struct {
	ID          string         `db:"id"`
	EOU         string         `db:"executed_obs_unit_id"`
	Module      int64          `db:"instrument_module_id"`
	Name        string         `db:"name"`
	Status      string         `db:"status"`
	FileIDs     pq.StringArray `db:"file_ids"`
	Size        sql.NullInt64  `db:"size_bytes"`
	Checksum    sql.NullString `db:"checksum"`
	FinalizedAt sql.NullTime   `db:"finalized_at"`
	Hash        sql.NullString `db:"finalize_hash"`
	CreatedAt   time.Time      `db:"created_at"`
}

func (r pkgRow) row(status string) *ingest.PackageRow {
	p := ingest.RawDataPackage{ID: r.ID, ExecutedObsUnitID: r.EOU, InstrumentModuleID: r.Module, Name: r.Name,
		Status: r.Status, CreatedAt: r.CreatedAt.UTC(), BufferStatus: status}
	if r.Size.Valid {
		v := r.Size.Int64
		p.SizeBytes = &v
	}
	if r.Checksum.Valid {
		v := r.Checksum.String
		p.Checksum = &v
	}
	if r.FinalizedAt.Valid {
		t := r.FinalizedAt.Time.UTC()
		p.FinalizedAt = &t
	}
	return &ingest.PackageRow{Package: p, FileIDs: r.FileIDs, FinalizeHash: r.Hash.String}
}

const pkgColumns = `id::text, executed_obs_unit_id::text, instrument_module_id, name, status,
    ARRAY(SELECT m.file_id::text FROM raw_data_package_files m WHERE m.package_id = raw_data_packages.id ORDER BY 1) AS file_ids,
    size_bytes, checksum, finalized_at, finalize_hash, created_at`

// Package returns a package row, or nil.
func (s *Store) Package(ctx context.Context, id string) (*ingest.PackageRow, error) {
	var r pkgRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+pkgColumns+` FROM raw_data_packages WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.row(s.Status), nil
}

// PackageFiles returns every committed file of a package (its members), ordered by
// path, at most max.
func (s *Store) PackageFiles(ctx context.Context, id string, max int) ([]ingest.RawDataFile, error) {
	var rows []fileRow
	err := s.DB.SelectContext(ctx, &rows, `SELECT `+fileColumns+` FROM raw_data_files f
WHERE f.id IN (SELECT m.file_id FROM raw_data_package_files m WHERE m.package_id = $1)
ORDER BY f.path, f.id LIMIT $2`, id, max)
	if err != nil {
		return nil, err
	}
	out := make([]ingest.RawDataFile, len(rows))
	for i, r := range rows {
		out[i] = r.record(s.Status)
	}
	return out, nil
}

// Files returns the registered files among ids, by id.
func (s *Store) Files(ctx context.Context, ids []string) (map[string]ingest.RawDataFile, error) {
	out := map[string]ingest.RawDataFile{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []fileRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+fileColumns+` FROM raw_data_files f WHERE f.id = ANY($1::uuid[])`, pq.StringArray(ids)); err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.ID] = r.record(s.Status)
	}
	return out, nil
}

// Orphan is a record whose link to another buffered record leads nowhere (yet): buffered writes
// arrive in any order, so these are normal for a moment and a problem only when they stay.
type Orphan struct {
	Kind    string `json:"kind" db:"kind"`       // file_without_execution, file_without_package, package_without_execution, finish_without_start
	ID      string `json:"id" db:"id"`           // the orphan
	Missing string `json:"missing" db:"missing"` // the id it refers to ("" for a finish without start)
}

// Orphans lists up to limit orphans of each kind.
func (s *Store) Orphans(ctx context.Context, limit int) ([]Orphan, error) {
	var out []Orphan
	err := s.DB.SelectContext(ctx, &out, `
(SELECT 'file_without_execution' AS kind, f.id::text AS id, f.executed_obs_unit_id::text AS missing FROM raw_data_files f
  WHERE NOT EXISTS (SELECT 1 FROM executed_obs_units e WHERE e.id = f.executed_obs_unit_id) LIMIT $1)
UNION ALL
(SELECT 'file_without_package', m.file_id::text, m.package_id::text FROM raw_data_package_files m
  WHERE NOT EXISTS (SELECT 1 FROM raw_data_packages p WHERE p.id = m.package_id) LIMIT $1)
UNION ALL
(SELECT 'package_without_execution', p.id::text, p.executed_obs_unit_id::text FROM raw_data_packages p
  WHERE NOT EXISTS (SELECT 1 FROM executed_obs_units e WHERE e.id = p.executed_obs_unit_id) LIMIT $1)
UNION ALL
(SELECT 'finish_without_start', e.id::text, '' FROM executed_obs_units e WHERE e.start_tx IS NULL LIMIT $1)`, limit)
	return out, err
}

// The Store is what the use cases read and check references in, the Applier what applies their
// writes when buffering is disabled.
var (
	_ ingest.Store  = (*Store)(nil)
	_ ingest.Direct = (*Applier)(nil)
)

// FileKeys calls fn with every committed file's id, module and path, in pages of at most limit
// in id order (keyset pagination: each page one index range scan); with committedSince set, only
// files committed at or after it (a sequential scan: the committed filter's build runs it once).
// It implements buffer.CommittedSource.
func (s *Store) FileKeys(ctx context.Context, limit int, committedSince time.Time, fn func([]ingest.FileKey) error) error {
	after := "00000000-0000-0000-0000-000000000000"
	for {
		var page []ingest.FileKey
		var err error
		if committedSince.IsZero() {
			err = s.DB.SelectContext(ctx, &page, `SELECT id::text AS id, instrument_module_id, path FROM raw_data_files
WHERE id > $1::uuid ORDER BY id LIMIT $2`, after, limit)
		} else {
			err = s.DB.SelectContext(ctx, &page, `SELECT id::text AS id, instrument_module_id, path FROM raw_data_files
WHERE committed_at >= $3 AND id > $1::uuid ORDER BY id LIMIT $2`, after, limit, committedSince)
		}
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
			after = page[len(page)-1].ID
		}
		if len(page) < limit {
			return nil
		}
	}
}

// TakeReplayed removes up to limit rows of ingest_replayed_files (the files a secondary site's
// replay committed, migration 00031) and calls fn with them before it commits: if fn fails they
// stay. Rows another caller is taking are skipped. It implements buffer.CommittedSource.
func (s *Store) TakeReplayed(ctx context.Context, limit int, fn func([]ingest.FileKey) error) (int, error) {
	tx, err := s.writer().BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var rows []ingest.FileKey
	if err := tx.SelectContext(ctx, &rows, `DELETE FROM ingest_replayed_files WHERE ctid IN (
    SELECT ctid FROM ingest_replayed_files LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING file_id::text AS id, instrument_module_id, path`, limit); err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	if err := fn(rows); err != nil {
		return 0, err
	}
	return len(rows), tx.Commit()
}
