// Package precalc serves visibility heatmaps from the heatmap cache and fills it: on the spot
// for a few sources, else by an admin-triggered precalculation job on the asynq queue
// "visibility", whose worker runs inside the catalog process. store.go declares the storage it
// needs (postgres.Store: engine_sources.go, heatmap_cache.go, precalc_jobs.go); records.go the
// cached rows, the jobs and their keys.
package precalc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// Queue is the asynq queue of precalculation jobs (its own, so ingest's buffer never waits on it).
const Queue = "visibility"

// TaskType is the asynq task type of a precalculation.
const TaskType = "visibility:precalculate"

// NotCachedError says a heatmap is not (fully) cached and too large to compute in a request.
type NotCachedError struct {
	Year          int
	Missing, Want int
	SyncMax       int
}

// Error says how much is missing.
func (e *NotCachedError) Error() string {
	return fmt.Sprintf("the %d heatmap of %d of these %d sources is not precalculated (at most %d are computed on request)",
		e.Year, e.Missing, e.Want, e.SyncMax)
}

// Service answers heatmaps and runs precalculations.
type Service struct {
	Store Store
	Site  *visibility.Site
	Queue *asynq.Client
	Log   *slog.Logger
	// SyncMax is the most uncached sources computed within a request.
	SyncMax int
	// Chunk is how many sources a job computes and stores per progress step.
	Chunk int
	// MaxOpenJobs bounds the jobs queued or running at once (OPS_VISIBILITY_MAX_OPEN_JOBS).
	MaxOpenJobs int
	now         func() time.Time
	rows        *prometheus.CounterVec
	jobs        *prometheus.CounterVec
}

// ErrTooManyJobs refuses a job while OPS_VISIBILITY_MAX_OPEN_JOBS are queued or running: a 503
// (problem.Kinded) — the queue is full now, and drains.
var ErrTooManyJobs = tooManyJobs{}

type tooManyJobs struct{}

func (tooManyJobs) Error() string {
	return "too many precalculation jobs are queued or running; retry when one has finished"
}

// ProblemKind makes it a 503.
func (tooManyJobs) ProblemKind() problem.Kind { return problem.Unavailable }

// New returns the service; rdb carries the asynq queue, reg receives its metrics
// (obsops_visibility_heatmap_rows_total{result="cached|computed"},
// obsops_visibility_jobs_total{status="completed|failed"}).
func New(st Store, site *visibility.Site, rdb redis.UniversalClient, cfg visibility.Config, log *slog.Logger, reg prometheus.Registerer) *Service {
	s := &Service{Store: st, Site: site, Queue: asynq.NewClientFromRedisClient(rdb), Log: log,
		SyncMax: cfg.SyncMaxSources, Chunk: cfg.JobChunk, MaxOpenJobs: cfg.MaxOpenJobs, now: time.Now,
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_visibility_heatmap_rows_total",
			Help: "Heatmap rows answered, by whether they came from the cache or were computed (in a request or a job)."}, []string{"result"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_visibility_jobs_total",
			Help: "Precalculation jobs finished, by outcome."}, []string{"status"}),
	}
	if reg != nil {
		reg.MustRegister(s.rows, s.jobs)
	}
	return s
}

// Heatmap is hours observable per source per UTC day of a year.
type Heatmap struct {
	Year        int
	Sources     []Source
	Hours       [][]float64
	GeneratedAt time.Time
	Cached      bool // every row came from the cache
}

// Get returns the heatmap of the sources from the cache; uncached rows are computed and cached
// when there are at most SyncMax of them, else the answer is a *NotCachedError.
func (s *Service) Get(ctx context.Context, year int, srcs []Source) (*Heatmap, error) {
	keys := make(map[int64]string, len(srcs))
	for i := range srcs {
		keys[srcs[i].ID] = ConstraintsKey(s.Site, &srcs[i].Source)
	}
	cached, generated, err := s.Store.CachedHeatmaps(ctx, year, keys)
	if err != nil {
		return nil, err
	}
	var missing []Source
	for _, src := range srcs {
		if _, ok := cached[src.ID]; !ok {
			missing = append(missing, src)
		}
	}
	hm := &Heatmap{Year: year, Sources: srcs, Hours: make([][]float64, len(srcs)), GeneratedAt: generated, Cached: len(missing) == 0}
	s.rows.WithLabelValues("cached").Add(float64(len(cached)))
	if len(missing) > 0 {
		if len(missing) > s.SyncMax {
			return nil, &NotCachedError{Year: year, Missing: len(missing), Want: len(srcs), SyncMax: s.SyncMax}
		}
		computed, err := s.compute(ctx, visibility.NewYear(s.Site, year), year, missing)
		if (database.MainUnreachable(err) || database.AtMainOnly(err)) && computed != nil {
			// A secondary site (it caches nothing: decisions §45), or the main's WAN down: the
			// answer stands, only caching it waits.
			s.Log.WarnContext(ctx, "visibility heatmap computed but not cached: the main site is unreachable", "sources", len(missing))
			err = nil
		}
		if err != nil {
			return nil, err
		}
		for id, h := range computed {
			cached[id] = h
		}
		hm.GeneratedAt = s.now().UTC()
	}
	for i, src := range srcs {
		hm.Hours[i] = cached[src.ID]
	}
	return hm, nil
}

// compute computes and caches the sources' rows. When caching fails it returns the rows with
// the error.
func (s *Service) compute(ctx context.Context, y *visibility.Year, year int, srcs []Source) (map[int64][]float64, error) {
	vs := make([]visibility.Source, len(srcs))
	for i := range srcs {
		vs[i] = srcs[i].Source
	}
	hours, err := y.Hours(ctx, vs, nil)
	if err != nil {
		return nil, err
	}
	entries := make([]Entry, len(srcs))
	out := make(map[int64][]float64, len(srcs))
	for i := range srcs {
		entries[i] = Entry{SourceID: srcs[i].ID, Key: ConstraintsKey(s.Site, &vs[i]), Hours: hours[i]}
		out[srcs[i].ID] = hours[i]
	}
	s.rows.WithLabelValues("computed").Add(float64(len(srcs)))
	if err := s.Store.SaveHeatmaps(ctx, year, entries); err != nil {
		return out, err // computed, not cached
	}
	return out, nil
}

type payload struct {
	JobID int64 `json:"job_id"`
}

// Enqueue records a precalculation of the sources for the year and queues it; a request equal
// to a job still queued or running answers that job (idempotent). A queued job's task is queued
// again (asynq's task id makes that a no-op when it is there), so a job recorded just before a
// crash is not left waiting forever.
func (s *Service) Enqueue(ctx context.Context, year int, ids []int64, by string) (Job, error) {
	job, created, err := s.Store.CreatePrecalcJob(ctx, JobKey(s.Site, year, ids), year, ids, by, s.MaxOpenJobs)
	if err != nil || !created && job.Status != JobQueued {
		return job, err
	}
	b, _ := json.Marshal(payload{JobID: job.ID})
	_, err = s.Queue.EnqueueContext(ctx, asynq.NewTask(TaskType, b), asynq.Queue(Queue),
		asynq.TaskID("visibility-job-"+strconv.FormatInt(job.ID, 10)), asynq.MaxRetry(3), asynq.Timeout(time.Hour))
	if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) {
		return job, nil
	}
	if created {
		msg := "could not be queued"
		_ = s.Store.UpdatePrecalcJob(context.WithoutCancel(ctx), job.ID, JobFailed, 0, &msg)
	}
	return Job{}, fmt.Errorf("enqueue job %d: %w", job.ID, err)
}

// Handle runs one precalculation task: chunk by chunk, sources already cached under the current
// settings are skipped (so a retried or repeated job resumes where it stopped), the others
// computed and stored, and the job's progress recorded after each chunk.
func (s *Service) Handle(ctx context.Context, t *asynq.Task) error {
	var p payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("bad payload: %w: %w", err, asynq.SkipRetry)
	}
	err := s.run(ctx, p.JobID)
	if err == nil {
		return nil
	}
	if errors.Is(err, problem.ErrNotFound) {
		return fmt.Errorf("job %d: %w: %w", p.JobID, err, asynq.SkipRetry)
	}
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if retried >= maxRetry {
		s.jobs.WithLabelValues(JobFailed).Inc()
		msg := err.Error()
		_ = s.Store.UpdatePrecalcJob(context.WithoutCancel(ctx), p.JobID, JobFailed, 0, &msg)
	}
	s.Log.ErrorContext(ctx, "visibility precalculation failed", "job_id", p.JobID, "retry", retried, "error", err)
	return err
}

func (s *Service) run(ctx context.Context, jobID int64) error {
	year, ids, err := s.Store.PrecalcJobSources(ctx, jobID)
	if err != nil {
		return err
	}
	if err := s.Store.UpdatePrecalcJob(ctx, jobID, JobRunning, 0, nil); err != nil {
		return err
	}
	start := time.Now()
	y := visibility.NewYear(s.Site, year)
	done := 0
	for len(ids) > 0 {
		n := min(s.Chunk, len(ids))
		chunk := ids[:n]
		ids = ids[n:]
		srcs, _, err := s.Store.EngineSources(ctx, chunk) // deleted meanwhile: nothing to compute
		if err != nil {
			return err
		}
		keys := make(map[int64]string, len(srcs))
		for i := range srcs {
			keys[srcs[i].ID] = ConstraintsKey(s.Site, &srcs[i].Source)
		}
		cached, _, err := s.Store.CachedHeatmaps(ctx, year, keys)
		if err != nil {
			return err
		}
		var todo []Source
		for _, src := range srcs {
			if _, ok := cached[src.ID]; !ok {
				todo = append(todo, src)
			}
		}
		if len(todo) > 0 {
			if _, err := s.compute(ctx, y, year, todo); err != nil {
				return err
			}
		}
		done += n
		status := JobRunning
		if len(ids) == 0 {
			status = JobCompleted
		}
		if err := s.Store.UpdatePrecalcJob(ctx, jobID, status, done, nil); err != nil {
			return err
		}
	}
	if done == 0 {
		if err := s.Store.UpdatePrecalcJob(ctx, jobID, JobCompleted, 0, nil); err != nil {
			return err
		}
	}
	s.jobs.WithLabelValues(JobCompleted).Inc()
	s.Log.InfoContext(ctx, "visibility precalculation done", "job_id", jobID, "year", year, "sources", done, "seconds", time.Since(start).Seconds())
	return nil
}

// NewWorker returns the asynq server of the visibility queue (one job at a time: each uses every
// core). Start it with Start and stop it with Shutdown (Run would trap the process's signals).
func NewWorker(rdb redis.UniversalClient, s *Service) (*asynq.Server, *asynq.ServeMux) {
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:            map[string]int{Queue: 1},
		Concurrency:       1,
		TaskCheckInterval: 200 * time.Millisecond,
		ShutdownTimeout:   10 * time.Second,
		BaseContext:       func() context.Context { return context.Background() },
		Logger:            asynqLogger{s.Log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskType, s.Handle)
	return srv, mux
}

// asynqLogger adapts slog to asynq's logger interface.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug(fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info(fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn(fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error(fmt.Sprint(args...)) }
func (l asynqLogger) Fatal(args ...any) { l.log.Error(fmt.Sprint(args...)) }
