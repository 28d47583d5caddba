// Package worker drains the ingest queue into the main database.
//
// Each task is applied in one transaction of idempotent upserts (postgres.Applier); after the
// commit its records leave the Redis read cache and its receipt records the commit. A failure is
// classified: the database unreachable or any other transient trouble → retried with backoff
// and never counted toward the dead letters; an integrity or data error (its obs unit was
// deleted, ...) → archived at once with the error (a dead letter).
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// New returns an asynq server on the ingest queue. Tasks are polled every 50 ms (asynq's 1 s
// default would put p99 time-to-durable above a second).
func New(rdb redis.UniversalClient, concurrency int, log *slog.Logger, h *Handler) *asynq.Server {
	return asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:            map[string]int{ingest.Queue: 1},
		Concurrency:       concurrency,
		TaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:   10 * time.Second,
		BaseContext:       func() context.Context { return context.Background() },
		Logger:            asynqLogger{log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,
		IsFailure:         IsFailure,
		RetryDelayFunc:    RetryDelay,
		ErrorHandler:      asynq.ErrorHandlerFunc(h.recordFailure),
	})
}

// IsFailure decides which errors count toward a task's retry limit: only those that are neither
// transient (database or Redis unreachable, a lost lease after a worker crash) — so an outage of
// any length never turns a task into a dead letter. Permanent errors are archived at once
// (asynq.SkipRetry) whatever this says.
func IsFailure(err error) bool {
	var pe *postgres.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	return errors.Is(err, errUnknown)
}

// errUnknown marks errors that are neither transient nor known permanent: they count, and after
// buffer.MaxRetry attempts the task is a dead letter.
var errUnknown = errors.New("unclassified failure")

// RetryDelay is the backoff between attempts: 0.5 s doubling per counted failure up to 30 s,
// with jitter. Transient failures do not count, so during an outage each task is retried every
// 0.5–1 s and the backlog drains as soon as the database is back.
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := 500 * time.Millisecond << min(n, 6)
	d = min(d, 30*time.Second)
	return d + time.Duration(rand.Int64N(int64(d)))
}

// Metrics of the worker.
type Metrics struct {
	Applied       *prometheus.CounterVec
	Failed        *prometheus.CounterVec
	TimeToDurable prometheus.Histogram
	BatchRows     prometheus.Histogram
}

// NewMetrics registers the worker's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Applied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_ingest_tasks_applied_total",
			Help: "Buffered tasks committed to the main database, by kind."}, []string{"kind"}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_ingest_tasks_failed_total",
			Help: "Failed attempts to apply a task, by kind and class (transient: retried without limit; permanent: dead letter; unknown: retried up to the limit)."},
			[]string{"kind", "class"}),
		TimeToDurable: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "obsops_ingest_time_to_durable_seconds",
			Help:    "From the API's acknowledgement (201) to the commit in the main database.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600}}),
		BatchRows: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "obsops_ingest_batch_rows",
			Help: "Rows written per applied task.", Buckets: []float64{1, 10, 100, 1000, 5000, 10000}}),
	}
	reg.MustRegister(m.Applied, m.Failed, m.TimeToDurable, m.BatchRows)
	return m
}

// Handler applies the ingest tasks.
type Handler struct {
	Apply   *postgres.Applier
	Buffer  *buffer.Buffer
	Log     *slog.Logger
	Metrics *Metrics
	// Secondary: this is a secondary site's worker (DESIGN §3): committed records stay cached
	// until the local replica has replayed the commit (see WatchReplica).
	Secondary bool
}

// Mux routes the task types to their handlers.
func (h *Handler) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.HandleFunc(ingest.TaskStart, h.start)
	mux.HandleFunc(ingest.TaskFinish, h.finish)
	mux.HandleFunc(ingest.TaskFiles, h.files)
	mux.HandleFunc(ingest.TaskPackage, h.pkg)
	return mux
}

func decode(t *asynq.Task, v any) error {
	if err := json.Unmarshal(t.Payload(), v); err != nil {
		return fmt.Errorf("unreadable %s payload: %v: %w", t.Type(), err, asynq.SkipRetry)
	}
	return nil
}

func (h *Handler) start(ctx context.Context, t *asynq.Task) error {
	var p ingest.StartTask
	if err := decode(t, &p); err != nil {
		return err
	}
	c, err := h.Apply.ApplyStart(ctx, p)
	items := []buffer.Item{{Kind: buffer.KindStart, ID: p.Start.ID, Index: buffer.OUIndex(p.Start.ObsUnitID)}}
	return h.done(ctx, t, p.Envelope, items, 1, c, err)
}

func (h *Handler) finish(ctx context.Context, t *asynq.Task) error {
	var p ingest.FinishTask
	if err := decode(t, &p); err != nil {
		return err
	}
	c, err := h.Apply.ApplyFinish(ctx, p)
	return h.done(ctx, t, p.Envelope, []buffer.Item{{Kind: buffer.KindFinish, ID: p.ID}}, 1, c, err)
}

func (h *Handler) files(ctx context.Context, t *asynq.Task) error {
	var p ingest.FilesTask
	if err := decode(t, &p); err != nil {
		return err
	}
	c, err := h.Apply.ApplyFiles(ctx, p)
	items := make([]buffer.Item, len(p.Files))
	for i, f := range p.Files {
		items[i] = buffer.Item{Kind: buffer.KindFile, ID: f.ID}
		if f.RawDataPackageID != "" {
			items[i].Index = buffer.PackageIndex(f.RawDataPackageID)
		}
	}
	return h.done(ctx, t, p.Envelope, items, len(p.Files), c, err)
}

func (h *Handler) pkg(ctx context.Context, t *asynq.Task) error {
	var p ingest.PackageTask
	if err := decode(t, &p); err != nil {
		return err
	}
	c, err := h.Apply.ApplyPackage(ctx, p)
	return h.done(ctx, t, p.Envelope, []buffer.Item{{Kind: buffer.KindPackage, ID: p.Package.ID}}, 1, c, err)
}

// done finishes an attempt: on success the records leave the read cache and the receipt records
// the commit; a failure is classified for asynq.
func (h *Handler) done(ctx context.Context, t *asynq.Task, env ingest.Envelope, items []buffer.Item, rows int, c postgres.Commit, err error) error {
	kind := ingest.KindOf(t.Type())
	if err != nil {
		var pe *postgres.PermanentError
		if errors.As(err, &pe) {
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		var qe *pq.Error
		if errors.As(err, &qe) {
			switch qe.Code.Class() {
			case "08", "40", "53", "57", "58": // connection, rollback, resources, shutdown, system
			default: // e.g. the schema is older than this build: counted, dead after MaxRetry
				return fmt.Errorf("%w: %w", errUnknown, err)
			}
		}
		return err // transient: the database is unreachable, shutting down, or the attempt timed out
	}
	evict := h.Buffer.Evict
	if h.Secondary {
		evict = h.Buffer.MarkCommitted
	}
	if err := evict(ctx, env.TxID, items, c.LSN, c.At); err != nil {
		// Committed, but Redis did not take the bookkeeping: the retry re-applies (a no-op) and
		// evicts then.
		return fmt.Errorf("evict committed records: %w", err)
	}
	h.Metrics.Applied.WithLabelValues(kind).Inc()
	h.Metrics.BatchRows.Observe(float64(rows))
	if !env.AcceptedAt.IsZero() {
		h.Metrics.TimeToDurable.Observe(time.Since(env.AcceptedAt).Seconds())
	}
	return nil
}

// recordFailure is asynq's error handler: counts the failure and notes it in the receipt.
func (h *Handler) recordFailure(ctx context.Context, t *asynq.Task, err error) {
	class := "transient"
	var pe *postgres.PermanentError
	switch {
	case errors.As(err, &pe):
		class = "permanent"
	case errors.Is(err, errUnknown):
		class = "unknown"
	}
	h.Metrics.Failed.WithLabelValues(ingest.KindOf(t.Type()), class).Inc()
	var env struct{ ingest.Envelope }
	if json.Unmarshal(t.Payload(), &env) == nil && env.TxID != "" {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		h.Buffer.RecordFailure(rctx, env.TxID, err)
		cancel()
	}
	if class == "permanent" {
		h.Log.Error("task is a dead letter", "type", t.Type(), "error", err.Error())
	} else {
		h.Log.Warn("task failed; will retry", "type", t.Type(), "class", class, "error", err.Error())
	}
}

// asynqLogger adapts slog to asynq's logger interface.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug(sprint(args)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info(sprint(args)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn(sprint(args)) }
func (l asynqLogger) Error(args ...any) { l.log.Error(sprint(args)) }
func (l asynqLogger) Fatal(args ...any) { l.log.Error(sprint(args)) }

func sprint(args []any) string {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return s
		}
	}
	return slog.AnyValue(args).String()
}
