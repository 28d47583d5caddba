package precalc

import (
	"context"
	"time"
)

// Store is what the heatmap service reads and writes (postgres.Store implements it): sources as
// the engine needs them, the heatmap cache and the precalculation jobs.
type Store interface {
	// EngineSources reads the sources with these ids, in the order given; missing lists ids
	// that do not exist.
	EngineSources(ctx context.Context, ids []int64) (found []Source, missing []int64, err error)
	// CachedHeatmaps returns the cached hours of the sources for the year whose key matches
	// (keys by source id); sources without a current entry are absent from the map. The time
	// is when the oldest row was computed.
	CachedHeatmaps(ctx context.Context, year int, keys map[int64]string) (map[int64][]float64, time.Time, error)
	// SaveHeatmaps caches rows, replacing stale entries of the same sources and year.
	SaveHeatmaps(ctx context.Context, year int, entries []Entry) error
	// CreatePrecalcJob records a queued job unless one with the same key is queued or running,
	// which is then returned with created = false, or maxOpen jobs are queued or running (then
	// ErrTooManyJobs; concurrent creates may each pass the count once, so the bound holds within
	// the number of concurrent callers).
	CreatePrecalcJob(ctx context.Context, key string, year int, ids []int64, by string, maxOpen int) (job Job, created bool, err error)
	// PrecalcJobSources returns a job's year and source ids (an error wrapping
	// problem.ErrNotFound for an unknown job).
	PrecalcJobSources(ctx context.Context, id int64) (year int, ids []int64, err error)
	// UpdatePrecalcJob sets a job's status and progress (and error, for a failure).
	UpdatePrecalcJob(ctx context.Context, id int64, status string, done int, errText *string) error
}
