// Package planner runs the transfer pipeline on top of the store: the planner (planner.go; one
// active replica at a time, elected with a PostgreSQL advisory lock), its wake-ups (wake.go), the
// overview publisher it runs (overview.go), and the inconsistent-package set in Redis with its
// periodic sweep and reconcile (sweep.go).
package planner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// PlannerLockID is the advisory-lock key held by the active planner ("transfer").
const PlannerLockID int64 = 0x7472616e73666572

// batch bounds each planner step's work per round.
const batch = 500

// minRoundGap is the least time from one round's start to the next when wake-ups keep coming:
// under a stream of completes (thousands per second) the planner runs at most this often instead
// of back to back, each round handling everything committed meanwhile. A round costs a few
// milliseconds of database time even with nothing to do; what it makes (a DTP, the next
// operation of a chain) waits for movers that work for minutes.
const minRoundGap = 250 * time.Millisecond

// groupEvery is the least time between two Group steps of the running planner. Grouping waits
// for OPS_DTP_TARGET_BYTES or OPS_DTP_MAX_WAIT (default 10 GiB or an hour), so answering every
// wake-up would buy nothing but reading the packages waiting to be grouped ten times a second.
const groupEvery = time.Second

// Planner drives the pipeline: brings finalized packages in, groups them into DTPs, creates each
// next operation when its predecessor completes, expires stale leases,
// sweeps package states into the inconsistent set and publishes overview updates. Every replica
// runs one; only the holder of the advisory lock works, the others stand by.
type Planner struct {
	DB         *sqlx.DB
	Store      *postgres.Store
	Redis      *redis.Client
	Reconciler *Reconciler
	Config     *transfer.Config
	Log        *slog.Logger

	active prometheus.Gauge
	rounds *prometheus.CounterVec
	// lastFullEnter is when Enter last looked at every finalized package (see Store.Enter).
	lastFullEnter time.Time
	// lastGroup is when Group last ran (see groupEvery); groupSkipped says a round since left it
	// out, so the planner owes one at lastGroup + groupEvery.
	lastGroup    time.Time
	groupSkipped bool
	// ruleApplied says the replication rule was stored (applyReplication).
	ruleApplied bool
}

// NewPlanner returns a planner registering its metrics with reg.
func NewPlanner(db *sqlx.DB, store *postgres.Store, rdb *redis.Client, rec *Reconciler, cfg *transfer.Config, log *slog.Logger, reg prometheus.Registerer) *Planner {
	p := &Planner{DB: db, Store: store, Redis: rdb, Reconciler: rec, Config: cfg, Log: log,
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "obsops_transfer_planner_active", Help: "1 while this replica holds the planner lock."}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_transfer_planner_items_total", Help: "Items handled by the planner, by step."}, []string{"step"}),
	}
	if reg != nil {
		reg.MustRegister(p.active, p.rounds)
	}
	return p
}

// Run stands by for the planner lock and works while holding it, until ctx ends.
func (p *Planner) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := p.lead(ctx); err != nil && ctx.Err() == nil {
			p.Log.Warn("planner", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.Config.PlannerInterval):
		}
	}
}

// lead takes the lock if free and works until ctx ends or the lock's connection fails.
func (p *Planner) lead(ctx context.Context) error {
	conn, err := p.DB.Connx(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var got bool
	if err := conn.GetContext(ctx, &got, `SELECT pg_try_advisory_lock($1)`, PlannerLockID); err != nil || !got {
		return err
	}
	defer func() {
		_, _ = conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, PlannerLockID)
	}()
	if err := p.applyReplication(ctx); err != nil {
		return err
	}
	p.active.Set(1)
	defer p.active.Set(0)
	p.Log.Info("planner active")

	wake := p.Redis.Subscribe(ctx, WakeChannel)
	defer wake.Close()
	wakeC := wake.Channel()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pub := &publisher{store: p.Store, redis: p.Redis, log: p.Log}
	go pub.run(ctx, p.Config.OverviewInterval)

	tick := time.NewTicker(p.Config.PlannerInterval)
	defer tick.Stop()
	var lastSweep time.Time
	for {
		if err := conn.PingContext(ctx); err != nil {
			return err // the lock went with the connection
		}
		started := time.Now()
		p.round(ctx)
		if time.Since(lastSweep) >= p.Config.SweepInterval {
			if n, err := p.Reconciler.Sweep(ctx); err != nil && ctx.Err() == nil {
				p.Log.Warn("planner: sweep", "error", err)
			} else if n > 0 {
				p.Log.Warn("planner: packages whose stored state differs from their derivation added to the inconsistent set", "count", n)
			}
			lastSweep = time.Now()
		}
		var groupDue <-chan time.Time // a Group left out by a woken round is not left for the next poll
		if p.groupSkipped {
			groupDue = time.After(time.Until(p.lastGroup.Add(groupEvery)))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-groupDue:
		case <-wakeC:
			// Wake-ups that arrive until the next round starts are answered by it.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(started.Add(minRoundGap))):
			}
			drain(wakeC)
		}
	}
}

// drain discards the wake-ups queued on c.
func drain(c <-chan *redis.Message) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// round runs every step once.
func (p *Planner) round(ctx context.Context) {
	step := func(name string, fn func() (int, error)) {
		n, err := fn()
		if err != nil && ctx.Err() == nil {
			p.Log.Warn("planner step failed", "step", name, "error", err)
		}
		if n > 0 {
			p.rounds.WithLabelValues(name).Add(float64(n))
		}
	}
	step("expire_leases", func() (int, error) { return p.Store.ExpireLeases(ctx, batch) })
	step("enter", func() (int, error) {
		var since *time.Time
		if time.Since(p.lastFullEnter) < p.Config.SweepInterval {
			var err error
			if since, err = p.Store.EnterWatermark(ctx, 10*time.Minute); err != nil {
				return 0, err
			}
		}
		n, err := p.Store.Enter(ctx, batch, since)
		if err == nil && since == nil && n < batch {
			p.lastFullEnter = time.Now() // a full pass found everything
		}
		return n, err
	})
	step("advance", func() (int, error) { return p.Store.Advance(ctx, batch) })
	p.groupSkipped = time.Since(p.lastGroup) < groupEvery
	if !p.groupSkipped {
		p.lastGroup = time.Now()
		step("group", func() (int, error) { return p.Store.Group(ctx, p.Config.Grouping(), 10*batch) })
		step("advance", func() (int, error) { return p.Store.Advance(ctx, batch) })
	}
}

// RunOnce runs one planner round without the lock, every step included (tests and the bench
// drive the pipeline step by step with it); the first also stores the replication rule, as the
// active planner does when it takes the lock.
func (p *Planner) RunOnce(ctx context.Context) {
	if !p.ruleApplied {
		if err := p.applyReplication(ctx); err != nil {
			p.Log.Warn("planner: replication rule", "error", err)
		}
	}
	p.lastGroup = time.Time{}
	p.round(ctx)
}

// applyReplication stores the configured replication rule (OPS_ARCHIVE_MIN_COPIES,
// OPS_ARCHIVE_SITES) for transfer_derived_state; when it differs from the stored one, every
// package's state is derived again (logged). An unknown site keeps the planner from working.
func (p *Planner) applyReplication(ctx context.Context) error {
	n, err := p.Store.SetReplication(ctx, p.Config.Replication())
	if err != nil {
		return fmt.Errorf("replication rule: %w", err)
	}
	p.ruleApplied = true
	if n > 0 {
		p.Log.Warn("planner: replication rule changed; package states derived again", "changed", n)
	}
	return nil
}
