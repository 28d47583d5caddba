package postgres

// The precalculation job store (table visibility_jobs): one row per heatmap precalculation with
// its source set, status and progress. Every statement runs on the write pool (see Store.Write).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

const jobColumns = `id, status, year, sources_done, sources_total, error, created_at, updated_at`

// CreatePrecalcJob records a queued job unless one with the same key is queued or running, in which
// case that one is returned with created = false.
func (s *Store) CreatePrecalcJob(ctx context.Context, key string, year int, ids []int64, by string, maxOpen int) (job precalc.Job, created bool, err error) {
	for range 3 { // a concurrent insert or completion between the two statements: try again
		err = s.writer().GetContext(ctx, &job, `
			INSERT INTO visibility_jobs (idem_key, year, source_ids, sources_total, requested_by)
			SELECT $1, $2, $3, $4, $5
			WHERE (SELECT count(*) FROM visibility_jobs WHERE status IN ('queued', 'running')) < $6
			ON CONFLICT (idem_key) WHERE status IN ('queued', 'running') DO NOTHING
			RETURNING `+jobColumns, key, year, pq.Array(ids), len(ids), by, maxOpen)
		if err == nil {
			return job, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return precalc.Job{}, false, fmt.Errorf("create job: %w", err)
		}
		err = s.writer().GetContext(ctx, &job, `SELECT `+jobColumns+` FROM visibility_jobs
			WHERE idem_key = $1 AND status IN ('queued', 'running')`, key)
		if err == nil {
			return job, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return precalc.Job{}, false, fmt.Errorf("read job: %w", err)
		}
		var open int
		if err = s.writer().GetContext(ctx, &open, `SELECT count(*) FROM visibility_jobs WHERE status IN ('queued', 'running')`); err != nil {
			return precalc.Job{}, false, fmt.Errorf("count open jobs: %w", err)
		}
		if open >= maxOpen {
			return precalc.Job{}, false, precalc.ErrTooManyJobs
		}
	}
	return precalc.Job{}, false, fmt.Errorf("create job: %w", err)
}

// PrecalcJob reads a job; problem.ErrNotFound if there is none.
func (s *Store) PrecalcJob(ctx context.Context, id int64) (precalc.Job, error) {
	var j precalc.Job
	err := s.writer().GetContext(ctx, &j, `SELECT `+jobColumns+` FROM visibility_jobs WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return precalc.Job{}, fmt.Errorf("no precalculation job with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return precalc.Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return j, nil
}

// PrecalcJobSources returns a job's year and source ids.
func (s *Store) PrecalcJobSources(ctx context.Context, id int64) (year int, ids []int64, err error) {
	var arr pq.Int64Array
	err = s.writer().QueryRowContext(ctx, `SELECT year, source_ids FROM visibility_jobs WHERE id = $1`, id).Scan(&year, &arr)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("no precalculation job with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read job %d: %w", id, err)
	}
	return year, arr, nil
}

// UpdatePrecalcJob sets a job's status and progress (and error, for a failure).
func (s *Store) UpdatePrecalcJob(ctx context.Context, id int64, status string, done int, errText *string) error {
	_, err := s.writer().ExecContext(ctx, `UPDATE visibility_jobs SET status = $2, sources_done = $3, error = $4, updated_at = now()
		WHERE id = $1`, id, status, done, errText)
	if err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	return nil
}
