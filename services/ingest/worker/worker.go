// Package worker drains the ingest queue into the main database.
//
// Tasks are applied as idempotent upserts (postgres.Applier), several tasks handled at the same
// moment in one transaction (see batch.go); after the commit a task's records leave the Redis read
// cache and its receipt records the commit. A failure is classified: the database unreachable or
// any other transient trouble → retried and never counted toward the dead letters (while the
// database is unreachable tasks wait for a probe to reach it instead of retrying one by one); an
// integrity or data error (its obs unit was deleted, ...) → archived at once with the error (a dead
// letter).
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// New returns an asynq server on the ingest queue. An idle worker polls the queue every 10–30 ms
// (TaskCheckInterval 20 ms; asynq sleeps half of it plus up to all of it between empty polls): a
// write arriving meanwhile waits for the next poll, so this is most of time-to-durable at a
// moderate rate (asynq's 1 s default would put it above a second; 50 ms put its p50 near 40 ms).
// An idle worker costs ~50 polls a second, each one Lua call in Redis.
func New(rdb redis.UniversalClient, concurrency int, log *slog.Logger, h *Handler) *asynq.Server {
	return asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:            map[string]int{ingest.Queue: 1},
		Concurrency:       concurrency,
		TaskCheckInterval: 20 * time.Millisecond,
		// Retried tasks are due after 0.5–10 s (RetryDelay); asynq's default 5 s between checks
		// of the retry set would add up to 5 s more.
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          10 * time.Second,
		BaseContext:              func() context.Context { return context.Background() },
		Logger:                   asynqLogger{log.With("component", "asynq")},
		LogLevel:                 asynq.WarnLevel,
		IsFailure:                IsFailure,
		RetryDelayFunc:           RetryDelay,
		ErrorHandler:             asynq.ErrorHandlerFunc(h.recordFailure),
	})
}

// IsFailure decides which errors count toward a task's retry limit: only those that are neither
// transient (database or Redis unreachable, a lost lease after a worker crash) — so an outage of
// any length never turns a task into a dead letter. Permanent errors are archived at once
// (asynq.SkipRetry) whatever this says.
func IsFailure(err error) bool {
	var pe *ingest.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	return errors.Is(err, errUnknown)
}

// errNoLSN is a commit at a secondary site whose WAL position is unknown (transient: retried).
var errNoLSN = errors.New("committed, but the commit's WAL position could not be read; re-applying to learn it")

// errUnknown marks errors that are neither transient nor known permanent: they count, and after
// buffer.MaxRetry attempts the task is a dead letter.
var errUnknown = errors.New("unclassified failure")

// RetryDelay is the backoff between attempts: 0.5 s doubling per counted failure, capped at 5 s,
// plus up to as much jitter (so at most 10 s). Transient failures do not count, so a task that
// failed on an outage is due again 0.5–1 s later; and however long the outage, no task sleeps
// more than 10 s once the database is back (during the outage tasks wait at the worker's gate,
// not in the retry set: see batch.go).
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := 500 * time.Millisecond << min(n, 6)
	d = min(d, 5*time.Second)
	return d + time.Duration(rand.Int64N(int64(d)))
}

// Metrics of the worker.
type Metrics struct {
	Applied       *prometheus.CounterVec
	Failed        *prometheus.CounterVec
	TimeToDurable prometheus.Histogram
	BatchRows     prometheus.Histogram
	BatchTasks    prometheus.Histogram
	TxRows        prometheus.Histogram
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
		BatchTasks: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "obsops_ingest_batch_tasks",
			Help: "Tasks applied per transaction (more than one while the worker works through a backlog).", Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500}}),
		TxRows: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "obsops_ingest_transaction_rows",
			Help: "Rows written per transaction of the worker.", Buckets: []float64{1, 10, 100, 1000, 5000, 10000, 20000}}),
	}
	reg.MustRegister(m.Applied, m.Failed, m.TimeToDurable, m.BatchRows, m.BatchTasks, m.TxRows)
	return m
}

// RegisterIntegrityGauges registers on reg the two gauges of what the worker stored flagged instead
// of refusing an acknowledged write (postgres.IntegrityCounts), read from db at each scrape (a
// partial index and a table that is empty when all is well) and exported from the start, 0 when
// the database is consistent: obsops_ingest_inconsistent_executions and obsops_ingest_collisions.
// A failed read is NaN.
func RegisterIntegrityGauges(reg prometheus.Registerer, db *postgres.Applier) {
	read := func(pick func(postgres.IntegrityCounts) int64) func() float64 {
		return func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err := db.Integrity(ctx)
			if err != nil {
				return math.NaN()
			}
			return float64(pick(c))
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "obsops_ingest_inconsistent_executions",
			Help: "Executions stored flagged inconsistent: a start and a finish acknowledged separately that contradict each other (end before start); listed by migrations/invariants/executions_end_before_start.sql."},
			read(func(c postgres.IntegrityCounts) int64 { return c.InconsistentExecutions })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "obsops_ingest_collisions",
			Help: "Acknowledged records the worker could not apply as written because another record holds their path, file or package name (two sites' separate buffers); kept in ingest_collisions for an operator."},
			read(func(c postgres.IntegrityCounts) int64 { return c.Collisions })))
}

// Handler applies the ingest tasks. Start must run before it handles any.
type Handler struct {
	Apply   *postgres.Applier
	Buffer  *buffer.Buffer
	Log     *slog.Logger
	Metrics *Metrics
	// Secondary: this is a secondary site's worker (docs/architecture.md, two sites): committed
	// records stay cached until the local replica has replayed the commit (see WatchReplica).
	Secondary bool
	// Probe is a pool on the main database of its own (OpenProbe), used only to test whether an
	// unreachable main database is back; nil uses Apply's pool.
	Probe *sqlx.DB
	// Appliers is how many batch transactions run at once (0: DefaultAppliers); MaxBatchRows
	// bounds the rows one gathers (0: DefaultMaxBatchRows).
	Appliers, MaxBatchRows int

	stopping <-chan struct{}
	jobs     chan *job
	gate     *gate
	payloads *semaphore.Weighted
}

// Mux routes the task types to their handlers.
func (h *Handler) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	for _, typ := range []string{ingest.TaskStart, ingest.TaskFinish, ingest.TaskFiles, ingest.TaskPackage} {
		mux.HandleFunc(typ, h.single)
	}
	mux.HandleFunc(ingest.TaskWrites, h.writes)
	return mux
}

// write is one buffered write as the worker applies it.
type write struct {
	typ     string
	payload []byte // as enqueued: a coalesced task's writes are requeued with it (see split)
	env     ingest.Envelope
	work    postgres.Work
	items   []ingest.Item // its records in the read cache, evicted once its rows are committed
	taskID  string        // the id of its own task (ingest.StartTaskID, ...)
}

// decodeWrite decodes the payload of a task of type typ.
func decodeWrite(typ string, payload []byte) (write, error) {
	w := write{typ: typ, payload: payload}
	var err error
	switch typ {
	case ingest.TaskStart:
		var p ingest.StartTask
		if err = ingest.DecodeTask(payload, &p); err == nil {
			w.env, w.work, w.taskID = p.Envelope, postgres.Work{Start: &p}, ingest.StartTaskID(p.Start.ID)
			w.items = []ingest.Item{{Kind: ingest.KindStart, ID: p.Start.ID, Index: buffer.OUIndex(p.Start.ObsUnitID)}}
		}
	case ingest.TaskFinish:
		var p ingest.FinishTask
		if err = ingest.DecodeTask(payload, &p); err == nil {
			w.env, w.work, w.taskID = p.Envelope, postgres.Work{Finish: &p}, ingest.FinishTaskID(p.ID)
			w.items = []ingest.Item{{Kind: ingest.KindFinish, ID: p.ID}}
		}
	case ingest.TaskFiles:
		var p ingest.FilesTask
		if err = ingest.DecodeTask(payload, &p); err == nil {
			w.env, w.work, w.taskID = p.Envelope, postgres.Work{Files: &p}, ingest.FilesTaskID(p.Files)
			w.items = make([]ingest.Item, len(p.Files))
			for i, f := range p.Files {
				w.items[i] = ingest.Item{Kind: ingest.KindFile, ID: f.ID, Claims: ingest.FileClaims(f), Unique: ingest.FileUnique(f)}
				if f.RawDataPackageID != "" {
					w.items[i].Index = buffer.PackageIndex(f.RawDataPackageID)
				}
			}
		}
	case ingest.TaskPackage:
		var p ingest.PackageTask
		if err = ingest.DecodeTask(payload, &p); err == nil {
			w.env, w.work, w.taskID = p.Envelope, postgres.Work{Package: &p}, ingest.PackageTaskID(p.Package.ID)
			w.items = []ingest.Item{{Kind: ingest.KindPackage, ID: p.Package.ID, Claims: ingest.PackageClaims(p.Package)}}
		}
	default:
		err = fmt.Errorf("unknown write type %q", typ)
	}
	if err != nil {
		return w, fmt.Errorf("unreadable %s payload: %v: %w", typ, err, asynq.SkipRetry)
	}
	return w, nil
}

// budget takes the task's share of the payload budget (released by the returned function), so
// a high concurrency cannot hold more decoded payloads than payloadBudget.
func (h *Handler) budget(ctx context.Context, t *asynq.Task) (func(), error) {
	n := int64(min(len(t.Payload()), payloadBudget))
	if err := h.payloads.Acquire(ctx, n); err != nil {
		return func() {}, err
	}
	return func() { h.payloads.Release(n) }, nil
}

// single applies a task of one write.
func (h *Handler) single(ctx context.Context, t *asynq.Task) error {
	release, err := h.budget(ctx, t)
	defer release()
	if err != nil {
		return err
	}
	w, err := decodeWrite(t.Type(), t.Payload())
	if err != nil {
		return err
	}
	return h.applyWrites(ctx, t, []write{w})
}

// writes applies a task of several writes (ingest.TaskWrites) in one transaction.
func (h *Handler) writes(ctx context.Context, t *asynq.Task) error {
	release, err := h.budget(ctx, t)
	defer release()
	if err != nil {
		return err
	}
	ws, err := decodeWrites(t.Payload())
	if err != nil {
		return err
	}
	return h.applyWrites(ctx, t, ws)
}

// decodeWrites decodes the payload of an ingest.TaskWrites task.
func decodeWrites(payload []byte) ([]write, error) {
	var p ingest.WritesTask
	if err := ingest.DecodeTask(payload, &p); err != nil {
		return nil, fmt.Errorf("unreadable %s payload: %v: %w", ingest.TaskWrites, err, asynq.SkipRetry)
	}
	ws := make([]write, len(p.Writes))
	for i, sw := range p.Writes {
		var err error
		if ws[i], err = decodeWrite(sw.Type, sw.Payload); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// Records are the cached records of a task's writes (its type and payload as enqueued): what
// dropping it as a dead letter takes out of the read cache (ingest admin).
func Records(typ string, payload []byte) ([]ingest.Item, error) {
	var ws []write
	var err error
	if typ == ingest.TaskWrites {
		ws, err = decodeWrites(payload)
	} else {
		var w write
		w, err = decodeWrite(typ, payload)
		ws = []write{w}
	}
	if err != nil {
		return nil, err
	}
	var items []ingest.Item
	for _, w := range ws {
		items = append(items, w.items...)
	}
	return items, nil
}

// applyWrites applies the writes of task t together and finishes the attempt: on success their
// records leave the read cache and their receipts record the commit; a failure is classified for
// asynq — except that a coalesced task whose writes cannot all apply is split (see split), so
// that only the write at fault becomes a dead letter.
func (h *Handler) applyWrites(ctx context.Context, t *asynq.Task, ws []write) error {
	txs, works := make([]string, len(ws)), make([]postgres.Work, len(ws))
	for i, w := range ws {
		txs[i], works[i] = w.env.TxID, w.work
	}
	c, err := h.apply(ctx, txs, works)
	if err != nil {
		switch class := classOf(err); {
		case class == classTransient:
			return err // the database is unreachable, shutting down, or the attempt timed out
		case t.Type() == ingest.TaskWrites:
			return h.split(ctx, ws, err)
		case class == classPermanent:
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		default:
			return fmt.Errorf("%w: %w", errUnknown, err) // e.g. the schema is older than this build: counted, dead after MaxRetry
		}
	}
	applied := make([]buffer.Applied, len(ws))
	for i, w := range ws {
		applied[i] = buffer.Applied{Tx: w.env.TxID, Items: w.items}
	}
	evict := h.Buffer.Evict
	if h.Secondary {
		if c.LSN == "" {
			// Committed, but the WAL position query failed (the WAN dropped right after the
			// commit): without it the cache would have to let the records go before the replica
			// has them. The retry re-applies (a no-op) and learns a position past this commit.
			return errNoLSN
		}
		evict = h.Buffer.MarkCommitted
	}
	if err := evict(ctx, applied, c.LSN, c.At); err != nil {
		// Committed, but Redis did not take the bookkeeping: the retry re-applies (a no-op) and
		// evicts then.
		return fmt.Errorf("evict committed records: %w", err)
	}
	for _, w := range ws {
		h.Metrics.Applied.WithLabelValues(ingest.KindOf(w.typ)).Inc()
		h.Metrics.BatchRows.Observe(float64(w.work.Rows()))
		if !w.env.AcceptedAt.IsZero() {
			h.Metrics.TimeToDurable.Observe(time.Since(w.env.AcceptedAt).Seconds())
		}
	}
	return nil
}

// split requeues each write of a coalesced task that could not apply as a task of its own (its
// own task id and type, the payload it was held with, so its transaction stays the same), and
// ends the coalesced task: the writes that can apply then commit on their own, and the one at
// fault fails on its own and becomes a dead letter with its error, as if it had never been
// coalesced. Requeuing is idempotent (a task id already queued is left as it is), so a crash
// in the middle is repaired by the coalesced task's retry.
func (h *Handler) split(ctx context.Context, ws []write, cause error) error {
	reqs := make([]buffer.Requeue, len(ws))
	for i, w := range ws {
		reqs[i] = buffer.Requeue{Tx: w.env.TxID, TaskType: w.typ, TaskID: w.taskID, Payload: w.payload}
	}
	if err := h.Buffer.RequeueEach(ctx, reqs); err != nil {
		return fmt.Errorf("requeue the writes of a coalesced task one by one (after: %v): %w", cause, err)
	}
	h.Log.Warn("a write of a coalesced task cannot apply: its writes were requeued one by one", "writes", len(ws), "error", cause.Error())
	return nil
}

// Classes of failures.
const (
	classTransient = "transient" // retried without limit
	classPermanent = "permanent" // a dead letter at once
	classUnknown   = "unknown"   // retried up to buffer.MaxRetry
)

// classOf classifies an attempt's error: integrity and data errors are permanent; a database
// error of another class than connection, rollback, resources, shutdown or system is unknown;
// everything else (unreachable, timed out) is transient.
func classOf(err error) string {
	var pe *ingest.PermanentError
	if errors.As(err, &pe) {
		return classPermanent
	}
	if errors.Is(err, errUnknown) {
		return classUnknown
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		switch qe.Code.Class() {
		case "08", "40", "53", "57", "58":
		default:
			return classUnknown
		}
	}
	return classTransient
}

// recordFailure is asynq's error handler: counts the failure and notes it in the receipts of the
// task's writes.
func (h *Handler) recordFailure(ctx context.Context, t *asynq.Task, err error) {
	class := classOf(err)
	h.Metrics.Failed.WithLabelValues(ingest.KindOf(t.Type()), class).Inc()
	if txs := txsOf(t); len(txs) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		h.Buffer.RecordFailure(rctx, err, txs...)
		cancel()
	}
	switch {
	case class == classPermanent:
		h.Log.Error("task is a dead letter", "type", t.Type(), "error", err.Error())
	case errors.Is(err, errUnreachable): // the gate's own timeout: logged once when it closed
		h.Log.Debug("task waited for the main database; will retry", "type", t.Type())
	default:
		h.Log.Warn("task failed; will retry", "type", t.Type(), "class", class, "error", err.Error())
	}
}

// txsOf lists the transactions of a task's writes (none if its payload is unreadable).
func txsOf(t *asynq.Task) []string {
	if t.Type() == ingest.TaskWrites {
		var p struct {
			Writes []struct {
				Payload struct{ ingest.Envelope } `json:"payload"`
			} `json:"writes"`
		}
		_ = ingest.DecodeTask(t.Payload(), &p)
		txs := make([]string, 0, len(p.Writes))
		for _, w := range p.Writes {
			if w.Payload.TxID != "" {
				txs = append(txs, w.Payload.TxID)
			}
		}
		return txs
	}
	var env struct{ ingest.Envelope }
	if json.Unmarshal(t.Payload(), &env) != nil || env.TxID == "" {
		return nil
	}
	return []string{env.TxID}
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
