// Package store is the visibility routes' PostgreSQL side: reading sources as the engine needs
// them, the heatmap cache (visibility_heatmaps) and precalculation jobs (visibility_jobs).
package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// writer is the pool for changes and jobs (see Write).
func (s *Store) writer() *sqlx.DB {
	if s.Write != nil {
		return s.Write
	}
	return s.DB
}

// ErrNotFound is returned for an unknown source, program or job.
var ErrNotFound = errors.New("not found")

// Store reads and writes the visibility tables.
type Store struct {
	// DB answers reads of sources and cached heatmaps (at a secondary site the local replica).
	DB *sqlx.DB
	// Write, when set, takes the cache writes and every statement on jobs, reads included: a job
	// is created at the main site and must be found right after, before the replica has it.
	// Unset: DB.
	Write *sqlx.DB
}

// Source is a catalog source with what the engine needs.
type Source struct {
	ID     int64
	Name   string
	Source visibility.Source
}

type sourceRow struct {
	ID    int64           `db:"id"`
	Name  string          `db:"name"`
	Kind  string          `db:"kind"`
	RA    sql.NullFloat64 `db:"ra_deg"`
	Dec   sql.NullFloat64 `db:"dec_deg"`
	PMRA  sql.NullFloat64 `db:"pm_ra_mas_yr"`
	PMDec sql.NullFloat64 `db:"pm_dec_mas_yr"`
	Epoch sql.NullFloat64 `db:"epoch"`
	Body  sql.NullString  `db:"body"`
	Elev  sql.NullFloat64 `db:"elevation_deg"`
	AzMin sql.NullFloat64 `db:"az_min_deg"`
	AzMax sql.NullFloat64 `db:"az_max_deg"`
}

func (r *sourceRow) source() Source {
	return Source{ID: r.ID, Name: r.Name, Source: visibility.Source{
		Kind: r.Kind, RADeg: r.RA.Float64, DecDeg: r.Dec.Float64, PMRAMasYr: r.PMRA.Float64,
		PMDecMasYr: r.PMDec.Float64, Epoch: r.Epoch.Float64, Body: r.Body.String,
		ElevationDeg: r.Elev.Float64, AzMinDeg: r.AzMin.Float64, AzMaxDeg: r.AzMax.Float64,
	}}
}

const sourceColumns = `id, name, kind, ra_deg, dec_deg, pm_ra_mas_yr, pm_dec_mas_yr, epoch, body, elevation_deg, az_min_deg, az_max_deg`

// Source reads one source; ErrNotFound if there is none with this id.
func (s *Store) Source(ctx context.Context, id int64) (Source, error) {
	var r sourceRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+sourceColumns+` FROM sources WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Source{}, ErrNotFound
	}
	if err != nil {
		return Source{}, fmt.Errorf("read source %d: %w", id, err)
	}
	return r.source(), nil
}

// Sources reads the sources with these ids, in the order given; missing lists ids that do not exist.
func (s *Store) Sources(ctx context.Context, ids []int64) (found []Source, missing []int64, err error) {
	var rows []sourceRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+sourceColumns+` FROM sources WHERE id = ANY($1)`, pq.Array(ids)); err != nil {
		return nil, nil, fmt.Errorf("read sources: %w", err)
	}
	byID := make(map[int64]*sourceRow, len(rows))
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	for _, id := range ids {
		if r, ok := byID[id]; ok {
			found = append(found, r.source())
		} else {
			missing = append(missing, id)
		}
	}
	return found, missing, nil
}

// ProgramSourceIDs lists the distinct sources of a program's obs units (by source id);
// ErrNotFound if the program does not exist.
func (s *Store) ProgramSourceIDs(ctx context.Context, programID int64) ([]int64, error) {
	// One query: no row means no program; a program without obs units gives an empty array.
	var ids pq.Int64Array
	err := s.DB.GetContext(ctx, &ids, `
		SELECT ARRAY(SELECT DISTINCT source_id FROM obs_units WHERE program_id = p.id ORDER BY source_id)
		FROM observing_programs p WHERE p.id = $1`, programID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read program %d sources: %w", programID, err)
	}
	return []int64(ids), nil
}

// ProgramSources reads the distinct sources of a program's obs units, by id, in one query;
// ErrNotFound if the program does not exist.
func (s *Store) ProgramSources(ctx context.Context, programID int64) ([]Source, error) {
	var rows []sourceRow
	err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+sourceColumns+` FROM sources
		WHERE id IN (SELECT source_id FROM obs_units WHERE program_id = $1)
		ORDER BY id`, programID)
	if err != nil {
		return nil, fmt.Errorf("read program %d sources: %w", programID, err)
	}
	if len(rows) == 0 {
		// no sources: an empty program, or none at all
		if _, err := s.ProgramSourceIDs(ctx, programID); err != nil {
			return nil, err
		}
	}
	out := make([]Source, len(rows))
	for i := range rows {
		out[i] = rows[i].source()
	}
	return out, nil
}

// AllSourceIDs lists every source, by id.
func (s *Store) AllSourceIDs(ctx context.Context) ([]int64, error) {
	ids := []int64{}
	if err := s.DB.SelectContext(ctx, &ids, `SELECT id FROM sources ORDER BY id`); err != nil {
		return nil, fmt.Errorf("read source ids: %w", err)
	}
	return ids, nil
}

// ConstraintsKey is the cache key of a source's heatmap under the site's settings: SHA-256 of
// both fingerprints, so moving the source or changing the site makes the old entry a miss.
func ConstraintsKey(site *visibility.Site, src *visibility.Source) string {
	h := sha256.Sum256([]byte("v1|" + site.Fingerprint() + "|" + src.Kind + "|" + src.Fingerprint()))
	return hex.EncodeToString(h[:])
}

// Cached returns the cached hours of the sources for the year whose key matches (keys by source
// id); sources without a current entry are absent from the map.
func (s *Store) Cached(ctx context.Context, year int, keys map[int64]string) (map[int64][]float64, time.Time, error) {
	ids := make([]int64, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	// every row of these sources for the year (normally one each: Save replaces stale ones),
	// matched against the current keys here
	rows, err := s.DB.QueryContext(ctx, `
		SELECT source_id, constraints_key, hours, computed_at FROM visibility_heatmaps
		WHERE source_id = ANY($2) AND year = $1`, year, pq.Array(ids))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
	}
	defer rows.Close()
	out := make(map[int64][]float64, len(keys))
	var oldest time.Time
	for rows.Next() {
		var id int64
		var key string
		var b []byte
		var at time.Time
		if err := rows.Scan(&id, &key, &b, &at); err != nil {
			return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
		}
		if keys[id] != key {
			continue // computed under other settings or coordinates: stale
		}
		out[id] = decodeHours(b)
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
	}
	return out, oldest.UTC(), nil
}

// Entry is one computed heatmap row to cache.
type Entry struct {
	SourceID int64
	Key      string
	Hours    []float64
}

// Save caches heatmap rows in one statement, replacing any entry of the same source and year
// under another key (a stale one). A source deleted meanwhile is skipped.
func (s *Store) Save(ctx context.Context, year int, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]int64, len(entries))
	keys := make([]string, len(entries))
	hours := make([][]byte, len(entries))
	for i, e := range entries {
		ids[i], keys[i], hours[i] = e.SourceID, e.Key, encodeHours(e.Hours)
	}
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM visibility_heatmaps WHERE year = $1 AND source_id = ANY($2)`, year, pq.Array(ids)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
		INSERT INTO visibility_heatmaps (source_id, year, constraints_key, hours)
		SELECT e.source_id, $1, e.constraints_key, e.hours
		FROM unnest($2::bigint[], $3::text[], $4::bytea[]) AS e(source_id, constraints_key, hours)
		JOIN sources s ON s.id = e.source_id`, year, pq.Array(ids), pq.Array(keys), pq.Array(hours))
		return err
	})
	if err != nil {
		return fmt.Errorf("save heatmaps: %w", err)
	}
	return nil
}

func encodeHours(h []float64) []byte {
	b := make([]byte, 4*len(h))
	for i, v := range h {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	}
	return b
}

func decodeHours(b []byte) []float64 {
	h := make([]float64, len(b)/4)
	for i := range h {
		h[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return h
}

// Job is a precalculation job.
type Job struct {
	ID           int64     `db:"id" json:"job_id"`
	Status       string    `db:"status" json:"status" enum:"queued,running,completed,failed"`
	Year         int       `db:"year" json:"year"`
	SourcesDone  int       `db:"sources_done" json:"sources_done"`
	SourcesTotal int       `db:"sources_total" json:"sources_total"`
	Error        *string   `db:"error" json:"error"`
	CreatedAt    time.Time `db:"created_at" json:"created_at"`
	UpdatedAt    time.Time `db:"updated_at" json:"updated_at"`
}

// Job statuses.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobCompleted = "completed"
	JobFailed    = "failed"
)

const jobColumns = `id, status, year, sources_done, sources_total, error, created_at, updated_at`

// JobKey is the idempotency key of a precalculation: the year, the source set and the site.
func JobKey(site *visibility.Site, year int, ids []int64) string {
	sorted := append([]int64(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var b strings.Builder
	fmt.Fprintf(&b, "v1|%d|%s|", year, site.Fingerprint())
	for _, id := range sorted {
		fmt.Fprintf(&b, "%d,", id)
	}
	h := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(h[:])
}

// CreateJob records a queued job unless one with the same key is queued or running, in which
// case that one is returned with created = false.
func (s *Store) CreateJob(ctx context.Context, key string, year int, ids []int64, by string) (job Job, created bool, err error) {
	for range 3 { // a concurrent insert or completion between the two statements: try again
		err = s.writer().GetContext(ctx, &job, `
			INSERT INTO visibility_jobs (idem_key, year, source_ids, sources_total, requested_by)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (idem_key) WHERE status IN ('queued', 'running') DO NOTHING
			RETURNING `+jobColumns, key, year, pq.Array(ids), len(ids), by)
		if err == nil {
			return job, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Job{}, false, fmt.Errorf("create job: %w", err)
		}
		err = s.writer().GetContext(ctx, &job, `SELECT `+jobColumns+` FROM visibility_jobs
			WHERE idem_key = $1 AND status IN ('queued', 'running')`, key)
		if err == nil {
			return job, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Job{}, false, fmt.Errorf("read job: %w", err)
		}
	}
	return Job{}, false, fmt.Errorf("create job: %w", err)
}

// Job reads a job; ErrNotFound if there is none.
func (s *Store) Job(ctx context.Context, id int64) (Job, error) {
	var j Job
	err := s.writer().GetContext(ctx, &j, `SELECT `+jobColumns+` FROM visibility_jobs WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return j, nil
}

// JobSources returns a job's year and source ids.
func (s *Store) JobSources(ctx context.Context, id int64) (year int, ids []int64, err error) {
	var arr pq.Int64Array
	err = s.writer().QueryRowContext(ctx, `SELECT year, source_ids FROM visibility_jobs WHERE id = $1`, id).Scan(&year, &arr)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, ErrNotFound
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read job %d: %w", id, err)
	}
	return year, arr, nil
}

// UpdateJob sets a job's status and progress (and error, for a failure).
func (s *Store) UpdateJob(ctx context.Context, id int64, status string, done int, errText *string) error {
	_, err := s.writer().ExecContext(ctx, `UPDATE visibility_jobs SET status = $2, sources_done = $3, error = $4, updated_at = now()
		WHERE id = $1`, id, status, done, errText)
	if err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	return nil
}
