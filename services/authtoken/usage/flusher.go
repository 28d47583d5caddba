package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/services/authtoken"
)

// Applied flush ids are kept this long (they only matter while a replay of the flush could
// still come), and pruned this often.
const (
	flushRetention = 7 * 24 * time.Hour
	pruneEvery     = time.Hour
)

// Flusher applies counted uses to PostgreSQL every interval, on shutdown, and (first of all)
// finishes flushes a crashed process left behind.
type Flusher struct {
	counter  *Counter
	sink     authtoken.UsageSink
	interval time.Duration
	log      *slog.Logger
	metrics  *flushMetrics

	stop      chan struct{}
	done      chan struct{}
	lastPrune time.Time // owned by the flushing goroutine
}

// FlushResult says what one Flush did.
type FlushResult struct {
	Flushes int   // flushes applied now (including ones left behind)
	Uses    int64 // uses they added
	Skipped int   // flushes found already applied (replays after a crash), finished without change
}

// NewFlusher returns a Flusher moving counter's uses into sink every interval; its metrics are
// registered with reg and its problems logged to log, when they are not nil.
func NewFlusher(counter *Counter, sink authtoken.UsageSink, interval time.Duration, log *slog.Logger, reg prometheus.Registerer) *Flusher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Flusher{counter: counter, sink: sink, interval: interval, log: log, metrics: newFlushMetrics(reg)}
}

// Start runs the flush loop until Stop. Its first round finishes what a previous process left.
func (f *Flusher) Start() {
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go f.loop()
}

// Stop ends the loop and flushes one last time, so a clean shutdown leaves nothing pending
// (service.OnShutdown runs it after the HTTP server has drained).
func (f *Flusher) Stop(ctx context.Context) error {
	if f.stop != nil {
		close(f.stop)
		<-f.done
	}
	_, err := f.Flush(ctx)
	return err
}

func (f *Flusher) loop() {
	defer close(f.done)
	ticker := time.NewTicker(f.interval)
	defer ticker.Stop()
	failing := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(10*f.interval, 10*time.Second))
		_, err := f.Flush(ctx)
		cancel()
		switch {
		case err != nil && !failing:
			f.log.Warn("token usage flush failing; uses stay counted in Redis and are retried", "error", err)
		case err == nil && failing:
			f.log.Info("token usage flush recovered")
		}
		failing = err != nil
		select {
		case <-f.stop:
			return
		case <-ticker.C:
		}
	}
}

// Flush finishes every unfinished flush (left by a crash, or by a failed round), then claims
// and applies everything pending. A flush that fails stays in Redis for the next round; while
// one fails nothing new is claimed.
func (f *Flusher) Flush(ctx context.Context) (FlushResult, error) {
	start := time.Now()
	var res FlushResult
	unfinished, err := f.counter.unfinishedFlushes(ctx)
	if err != nil {
		f.metrics.outcome("error")
		return res, fmt.Errorf("list unfinished flushes: %w", err)
	}
	var errs []error
	for _, id := range unfinished {
		errs = append(errs, f.apply(ctx, id, &res))
	}
	if err := errors.Join(errs...); err != nil {
		// The database is failing (at a secondary site: the main is unreachable). New uses stay
		// pending in their one hash instead of being claimed into a new flush every round, so
		// an outage of hours leaves a few flushes to apply when it ends, not one per interval.
		f.metrics.outcome("error")
		return res, err
	}
	id, err := f.counter.claimFlush(ctx, time.Now())
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("claim pending uses: %w", err))
	case id != "":
		errs = append(errs, f.apply(ctx, id, &res))
	}
	if err := errors.Join(errs...); err != nil {
		f.metrics.outcome("error")
		return res, err
	}
	if res.Flushes > 0 {
		f.metrics.outcome("applied")
		f.metrics.duration.Observe(time.Since(start).Seconds())
	}
	f.prune(ctx)
	return res, nil
}

// apply writes one claimed flush to the database, then forgets it in Redis.
func (f *Flusher) apply(ctx context.Context, id string, res *FlushResult) error {
	deltas, err := f.counter.readFlush(ctx, id)
	if err != nil {
		return fmt.Errorf("read flush %s: %w", id, err)
	}
	applied, err := f.sink.ApplyUsage(ctx, id, deltas)
	if err != nil {
		return fmt.Errorf("apply flush %s: %w", id, err)
	}
	if applied {
		uses := sumCounts(deltas)
		res.Flushes++
		res.Uses += uses
		f.metrics.uses.Add(float64(uses))
	} else {
		res.Skipped++
		f.metrics.outcome("replayed")
	}
	if err := f.counter.finishFlush(ctx, id); err != nil {
		return fmt.Errorf("finish flush %s: %w", id, err)
	}
	return nil
}

// prune forgets applied flush ids past their retention, except ones still unfinished in Redis.
func (f *Flusher) prune(ctx context.Context) {
	if time.Since(f.lastPrune) < pruneEvery {
		return
	}
	keep, err := f.counter.unfinishedFlushes(ctx)
	if err != nil {
		return
	}
	if _, err := f.sink.PruneUsageFlushes(ctx, time.Now().Add(-flushRetention), keep); err != nil {
		f.log.Warn("prune applied token usage flushes", "error", err)
		return
	}
	f.lastPrune = time.Now()
}

func sumCounts(deltas []authtoken.UsageDelta) int64 {
	var n int64
	for _, d := range deltas {
		n += d.Count
	}
	return n
}

type flushMetrics struct {
	flushes  *prometheus.CounterVec
	uses     prometheus.Counter
	duration prometheus.Histogram
}

func newFlushMetrics(reg prometheus.Registerer) *flushMetrics {
	m := &flushMetrics{
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_token_usage_flushes_total",
			Help: "Token usage flush rounds by outcome: applied, replayed (a flush left by a crash, already applied), error.",
		}, []string{"outcome"}),
		uses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_token_usage_flushed_uses_total",
			Help: "Token uses committed to PostgreSQL by the usage flusher.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "obsops_token_usage_flush_duration_seconds",
			Help:    "Duration of flush rounds that applied uses.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.flushes, m.uses, m.duration)
	}
	return m
}

func (m *flushMetrics) outcome(o string) { m.flushes.WithLabelValues(o).Inc() }
