package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"golang.org/x/sync/semaphore"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// Batching and reachability (the WAN between a secondary site and the main database may be down
// for hours).
//
// Every task handler hands its records to a small set of appliers and waits for the outcome. An
// idle applier takes the first waiting task and, without waiting for more, every other task
// already waiting, up to MaxBatchRows rows, and applies them in one transaction
// (postgres.ApplyBatch). While the worker keeps up, a task is applied alone at once (no added
// latency); with a backlog — a secondary site after a WAN outage, the main database back after a
// restart — up to OPS_INGEST_WORKER_CONCURRENCY tasks share one commit, and the backlog drains at
// the bulk rate instead of one commit (and over a WAN several round trips) per task.
//
// When the main database cannot be reached, the worker stops trying task by task: the first
// connection failure closes a gate, tasks wait at the gate (up to shortly before their own
// deadline, then they are retried without counting toward the dead letters), and a probe on a
// fresh connection every ProbeInterval opens it again. A backlog of any size costs the secondary
// site no CPU while the WAN is down, and drains within one probe interval of the WAN coming back.

const (
	// DefaultAppliers is how many batch transactions run at once (each holds one connection of
	// the worker's pool).
	DefaultAppliers = 4
	// DefaultMaxBatchRows bounds the rows one batch gathers (a task above it is applied whole).
	DefaultMaxBatchRows = 5000
	// ProbeInterval is how often an unreachable main database is probed.
	ProbeInterval = 250 * time.Millisecond
	// probeTimeout bounds one probe (its connection has the same I/O deadline).
	probeTimeout = 3 * time.Second
	// applyTimeout bounds one batch transaction; below buffer.TaskTimeout, so a batch ends before
	// the tasks waiting for it are given up.
	applyTimeout = 45 * time.Second
	// payloadBudget bounds the task payload bytes the handlers hold decoded at once (a 10,000-file
	// bulk task is ~3 MB), so a high concurrency cannot exhaust memory.
	payloadBudget = 64 << 20
)

// errUnreachable is what a task waiting at the closed gate returns when its time is up: transient
// (retried, never a dead letter).
var errUnreachable = errors.New("the main database is unreachable (waiting for it to come back)")

// errStopping gives a task back to the queue (retried, not counted) when the worker stops.
var errStopping = errors.New("the worker is stopping")

// job is one task's writes waiting for their batch.
type job struct {
	works []postgres.Work
	rows  int
	done  chan result // buffered: the applier never blocks on a handler that gave up
}

type result struct {
	c   ingest.Commit
	err error
}

// gate is closed while the main database is unreachable.
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // nil while open; closed (the channel) when the gate opens again
	since  time.Time
}

// close marks the main database unreachable; it reports whether the gate was open.
func (g *gate) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		return false
	}
	g.closed, g.since = make(chan struct{}), time.Now()
	return true
}

// open marks it reachable and wakes every waiting task; it returns how long it was closed.
func (g *gate) open() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		return 0
	}
	close(g.closed)
	g.closed = nil
	return time.Since(g.since)
}

func (g *gate) waitChan() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// wait returns at once while the gate is open; else when it opens, or errUnreachable a few
// seconds before ctx's deadline (the task is then retried), or errStopping when the worker stops.
func (g *gate) wait(ctx context.Context, stopping <-chan struct{}) error {
	ch := g.waitChan()
	if ch == nil {
		return nil
	}
	limit := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = time.Until(dl) - 5*time.Second
	}
	if limit <= 0 {
		return errUnreachable
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errUnreachable
	case <-ctx.Done():
		return ctx.Err()
	case <-stopping:
		return errStopping
	}
}

// unreachable reports whether err says the main database could not be reached (as opposed to a
// statement failing there).
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // our own shutdown
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		switch qe.Code.Class() {
		case "08", "57": // connection exception; operator intervention (shutdown, starting up)
			return true
		}
		return false
	}
	var pe *ingest.PermanentError
	return !errors.As(err, &pe)
}

// Start runs the appliers and the reachability probe until ctx ends. It must be called before
// the asynq server starts handling tasks; ending ctx gives every waiting task back (transient),
// so end it before shutting the asynq server down.
func (h *Handler) Start(ctx context.Context) {
	h.stopping = ctx.Done()
	h.jobs = make(chan *job)
	h.gate = &gate{}
	h.payloads = semaphore.NewWeighted(payloadBudget)
	n := h.Appliers
	if n <= 0 {
		n = DefaultAppliers
	}
	for range n {
		go h.applier(ctx)
	}
	go h.probe(ctx)
}

// apply hands a task's works (of transactions txs) to the appliers and waits for its batch's
// outcome: they commit together or not at all. While the main database is unreachable it first
// waits at the gate, noted in the receipts as a failed attempt (one per wait, not one per retry).
func (h *Handler) apply(ctx context.Context, txs []string, works []postgres.Work) (ingest.Commit, error) {
	if h.gate.waitChan() != nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		h.Buffer.RecordFailure(rctx, errUnreachable, txs...)
		cancel()
		if err := h.gate.wait(ctx, h.stopping); err != nil {
			return ingest.Commit{}, err
		}
	}
	j := &job{works: works, done: make(chan result, 1)}
	for _, w := range works {
		j.rows += w.Rows()
	}
	select {
	case h.jobs <- j:
	case <-ctx.Done():
		return ingest.Commit{}, ctx.Err()
	case <-h.stopping:
		return ingest.Commit{}, errStopping
	}
	select {
	case r := <-j.done:
		return r.c, r.err
	case <-ctx.Done():
		// The batch may still commit: the retry then re-applies it, a no-op.
		return ingest.Commit{}, ctx.Err()
	case <-h.stopping:
		return ingest.Commit{}, errStopping
	}
}

func (h *Handler) applier(ctx context.Context) {
	limit := h.MaxBatchRows
	if limit <= 0 {
		limit = DefaultMaxBatchRows
	}
	for {
		var first *job
		select {
		case <-ctx.Done():
			return
		case first = <-h.jobs:
		}
		batch, rows := []*job{first}, first.rows
	gather:
		for rows < limit {
			select {
			case j := <-h.jobs:
				batch, rows = append(batch, j), rows+j.rows
			default:
				break gather
			}
		}
		h.applyBatch(ctx, batch, rows)
	}
}

func (h *Handler) applyBatch(ctx context.Context, batch []*job, rows int) {
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	var works []postgres.Work
	for _, j := range batch {
		works = append(works, j.works...)
	}
	c, err := h.Apply.ApplyBatch(actx, works)
	if err == nil {
		h.Metrics.BatchTasks.Observe(float64(len(batch)))
		h.Metrics.TxRows.Observe(float64(rows))
	}
	if err != nil && len(batch) > 1 && classOf(err) != classTransient {
		// One task cannot apply (its obs unit was deleted, ...): apply each alone, so only that
		// one fails (and becomes a dead letter) and the others commit.
		for _, j := range batch {
			c, err := h.Apply.ApplyBatch(actx, j.works)
			j.done <- result{c, err}
		}
		return
	}
	if err != nil && unreachable(err) && h.gate.close() {
		h.Log.Warn("main database unreachable: tasks wait until a probe reaches it", "error", err.Error())
	}
	for _, j := range batch {
		j.done <- result{c, err}
	}
}

// probe opens the gate once the main database answers on a fresh connection.
func (h *Handler) probe(ctx context.Context) {
	every(ctx, ProbeInterval, func() {
		if h.gate.waitChan() == nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := probeOnce(pctx, h.Probe, h.Apply.DB)
		cancel()
		if err == nil {
			closedFor := h.gate.open()
			h.Log.Info("main database reachable again: draining", "unreachable_for", closedFor.Round(time.Millisecond).String())
		}
	})
}

// every calls fn every interval until ctx ends: the worker's background watches.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func probeOnce(ctx context.Context, probe, pool *sqlx.DB) error {
	if probe == nil {
		probe = pool
	}
	_, err := probe.ExecContext(ctx, `SELECT 1`)
	return err
}

// OpenProbe opens the pool the reachability probe uses: no idle connections (each probe dials
// afresh, so a connection broken by the outage is never what answers) and a short I/O deadline.
func OpenProbe(dsn string) (*sqlx.DB, error) {
	db, err := postgres.OpenWorkerDB(dsn, 1, probeTimeout, "")
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(0)
	return db, nil
}
