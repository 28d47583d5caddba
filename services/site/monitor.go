package site

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/database"
)

// SampleInterval is how often the Monitor samples by itself (for the metrics, /api/site/info and
// the replay rate); /buffer-stats and /health sample when asked.
const SampleInterval = 2 * time.Second

// replayWindow is the span over which the replay rate is measured.
const replayWindow = time.Minute

// ReplicaStatus is the local streaming replica of a secondary site.
//
// LagBytes is WAL the replica has received from the main site but not yet replayed (receive LSN
// minus replay LSN): the replica's own backlog, which does not grow while the WAN is down (nothing
// arrives). BehindMainBytes is how far its replay is behind the main primary's current WAL
// position, known only while the main is reachable. LagSeconds is the age of the last replayed
// transaction while replay is behind what was received, else 0: on an idle primary the time
// since the last transaction grows without any lag, so it is not reported as lag.
type ReplicaStatus struct {
	InRecovery      bool       `json:"in_recovery" doc:"Whether the local database is a standby (false: it is a primary, the site is misconfigured)."`
	ReceiveLSN      string     `json:"receive_lsn,omitempty" doc:"pg_last_wal_receive_lsn(): WAL received from the main site."`
	ReplayLSN       string     `json:"replay_lsn,omitempty" doc:"pg_last_wal_replay_lsn(): WAL applied, visible to reads here."`
	LagBytes        int64      `json:"lag_bytes" doc:"Received but not yet replayed WAL, bytes."`
	LagSeconds      float64    `json:"lag_seconds" doc:"Age of the last replayed transaction while replay is behind what was received; 0 when caught up."`
	BehindMainBytes *int64     `json:"behind_main_bytes,omitempty" doc:"The main primary's current WAL position minus the replay position; absent while the main is unreachable."`
	LastReplayAt    *time.Time `json:"last_replay_at,omitempty" doc:"pg_last_xact_replay_timestamp(): commit time of the last replayed transaction."`
	ReplayPaused    bool       `json:"replay_paused" doc:"pg_is_wal_replay_paused()."`
}

// Sample is one look at the site: the main link, the replica, the buffer.
type Sample struct {
	At      time.Time           `json:"measured_at"`
	Main    database.MainStatus `json:"main"`
	Replica *ReplicaStatus      `json:"replica,omitempty"`
	// Buffer is the full statistics (nil when Redis could not be read; BufferErr says why).
	Buffer    *BufferStats `json:"-"`
	BufferErr error        `json:"-"`
}

// Monitor samples what an operator watches beyond readiness: whether the main site's database
// answers (and since when), the local replica's lag, the buffer's backlog and replay rate. It
// keeps the latest sample and exports it as Prometheus gauges.
type Monitor struct {
	Secondary bool
	Main      *database.MainLink // at the main site: the local database, probed by each sample
	Local     *sqlx.DB           // the local database: at a secondary site its replica
	// MainReports, at a secondary site, reads ingest's report of the main database
	// (database.ReadMainReport): the site service does not connect to the main (decisions §45).
	// No report (ingest not running) counts as unreachable.
	MainReports func(context.Context) (database.MainReport, bool, error)
	Buffers     *BufferInspector
	Log         *slog.Logger
	// TokenCacheTTL is OPS_TOKEN_CACHE_TTL, assumed the same in every service of the site: how
	// long their in-process caches reuse a token's verification (RevocationBound).
	TokenCacheTTL time.Duration

	mu       sync.Mutex
	noReport time.Time // since when there has been no report of the main (zero: there is one)
	last     Sample
	history  []processed // the buffer's processed totals over the last replayWindow
	gauges   *monitorGauges
}

type processed struct {
	at    time.Time
	total int
}

// Run samples every SampleInterval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, SampleInterval)
		m.Sample(sctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Latest is the last sample taken (zero before the first).
func (m *Monitor) Latest() Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Sample looks at everything now, records the outcome and returns it.
func (m *Monitor) Sample(ctx context.Context) Sample {
	s := Sample{At: time.Now().UTC()}
	var mainLSN string
	if m.Secondary {
		s.Main, mainLSN = m.mainReport(ctx)
	} else {
		_ = m.Main.Probe(ctx) // the main database is this site's own
		s.Main = m.Main.Status()
	}
	if m.Secondary {
		r, err := m.replica(ctx, mainLSN)
		if err != nil && m.Log != nil {
			m.Log.Warn("replica status unreadable", "error", err)
		}
		s.Replica = r
	}
	if m.Buffers != nil {
		st, err := m.Buffers.Stats(ctx)
		if err != nil {
			s.BufferErr = err
		} else {
			st.Main = s.Main
			st.Main.LastError = ""
			st.MainDBReachable = s.Main.Reachable
			st.Replica = s.Replica
			st.RevocationBoundS = m.revocationBound(s)
			s.Buffer = &st
		}
	}
	m.mu.Lock()
	if s.Buffer != nil {
		s.Buffer.ReplayRatePerS = m.replayRate(s.At, s.Buffer.ProcessedTotal)
	}
	m.last = s
	m.mu.Unlock()
	m.export(s)
	return s
}

// mainReport is the main's state as ingest last reported it, and the main's WAL position then
// (empty: unknown). Without a current report the main counts as unreachable since the report
// stopped.
func (m *Monitor) mainReport(ctx context.Context) (database.MainStatus, string) {
	var (
		r   database.MainReport
		ok  bool
		err error
	)
	if m.MainReports != nil {
		r, ok, err = m.MainReports(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.noReport = time.Time{}
		st := r.Status
		st.UnreachableSeconds = 0
		if !st.Reachable {
			st.UnreachableSeconds = time.Since(st.Since).Seconds()
		}
		return st, r.WALLSN
	}
	if m.noReport.IsZero() {
		m.noReport = time.Now()
	}
	why := "no current report of the main database from ingest (is its worker running?)"
	if err != nil {
		why = "ingest's report of the main database unreadable: " + err.Error()
	}
	return database.MainStatus{Since: m.noReport.UTC(), UnreachableSeconds: time.Since(m.noReport).Seconds(), LastError: why}, ""
}

// revocationBound is the most seconds an API token revoked at the main site can still be
// accepted here (nil: no bound while the main is unreachable). At the main site authtoken drops
// the token's record and empties every service's in-process cache at once, a lost message being
// bounded by TokenCacheTTL. At a secondary the revocation arrives through the replica (its lag),
// the secondary's authtoken re-reads a record contract.SecondaryTokenRecordTTL after reading it,
// and the other services reuse its answer TokenCacheTTL at most.
func (m *Monitor) revocationBound(s Sample) *float64 {
	b := m.TokenCacheTTL.Seconds()
	if m.Secondary {
		if !s.Main.Reachable || s.Replica == nil || !s.Replica.InRecovery {
			return nil
		}
		b += contract.SecondaryTokenRecordTTL.Seconds() + s.Replica.LagSeconds
	}
	return &b
}

// replayRate adds a processed total to the history (at most one a second, so however often
// /buffer-stats is asked the history stays small) and returns the tasks per second over the
// window (0 until two samples exist). Called with mu held.
func (m *Monitor) replayRate(at time.Time, total int) float64 {
	if n := len(m.history); n == 0 || at.Sub(m.history[n-1].at) >= time.Second {
		m.history = append(m.history, processed{at, total})
	}
	for len(m.history) > 2 && at.Sub(m.history[1].at) >= replayWindow {
		m.history = m.history[1:]
	}
	first := m.history[0]
	span := at.Sub(first.at).Seconds()
	if span < 0.5 || total < first.total { // too short, or the counters were reset
		return 0
	}
	return float64(total-first.total) / span
}

// replica reads the local replica's replication state; with the main's WAL position (mainLSN, as
// ingest reported it), also how far its replay is behind it.
func (m *Monitor) replica(ctx context.Context, mainLSN string) (*ReplicaStatus, error) {
	var (
		r                  ReplicaStatus
		receive, replay    sql.NullString
		lagBytes           sql.NullInt64
		lagSeconds         sql.NullFloat64
		lastReplay         sql.NullTime
		paused, inRecovery sql.NullBool
	)
	err := m.Local.QueryRowContext(ctx, `
		SELECT pg_is_in_recovery(),
			pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text,
			pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint,
			CASE WHEN pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
				ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END,
			pg_last_xact_replay_timestamp(),
			CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END`).
		Scan(&inRecovery, &receive, &replay, &lagBytes, &lagSeconds, &lastReplay, &paused)
	if err != nil {
		return nil, err
	}
	r.InRecovery, r.ReceiveLSN, r.ReplayLSN = inRecovery.Bool, receive.String, replay.String
	r.LagBytes, r.LagSeconds, r.ReplayPaused = max(lagBytes.Int64, 0), max(lagSeconds.Float64, 0), paused.Bool
	if lastReplay.Valid {
		t := lastReplay.Time.UTC()
		r.LastReplayAt = &t
	}
	if mainLSN != "" && replay.Valid {
		var behind int64
		if err := m.Local.GetContext(ctx, &behind, `SELECT GREATEST(pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn), 0)::bigint`, mainLSN, replay.String); err == nil {
			r.BehindMainBytes = &behind
		}
	}
	return &r, nil
}

// monitorGauges are the Monitor's Prometheus gauges (at the main site the main link's own are
// registered by pkg/database: obsops_main_db_reachable, obsops_main_db_unreachable_seconds; at a
// secondary, with no link of its own, Register exports them from ingest's report).
type monitorGauges struct {
	lagBytes, lagSeconds, behindMain prometheus.Gauge
	replayRate, lastApply, oldest    prometheus.Gauge
	pending, retry, dead             prometheus.Gauge
}

// Register exports the Monitor's gauges on reg, updated by every sample.
func (m *Monitor) Register(reg prometheus.Registerer) {
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(x)
		return x
	}
	if m.Secondary {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "obsops_main_db_reachable",
				Help: "Whether the main site's database answered, as this secondary's ingest last reported (1) or not (0).",
			}, func() float64 {
				if m.Latest().Main.Reachable {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "obsops_main_db_unreachable_seconds",
				Help: "How long the main site's database has been unreachable, as this secondary's ingest reports; 0 while reachable.",
			}, func() float64 { return m.Latest().Main.UnreachableSeconds }),
		)
	}
	m.gauges = &monitorGauges{
		lagBytes:   g("obsops_site_replica_lag_bytes", "Secondary site: WAL received by the local replica but not yet replayed, bytes."),
		lagSeconds: g("obsops_site_replica_lag_seconds", "Secondary site: age of the last replayed transaction while the replica's replay is behind what it received; 0 when caught up."),
		behindMain: g("obsops_site_replica_behind_main_bytes", "Secondary site: the main primary's current WAL position minus the replica's replay position (last known while the main is unreachable)."),
		replayRate: g("obsops_site_buffer_replay_rate", "Buffered writes (ingest tasks) processed per second over the last minute."),
		lastApply:  g("obsops_site_buffer_last_apply_timestamp_seconds", "Unix time an ingest worker last committed a buffered write (0 before the first)."),
		oldest:     g("obsops_site_buffer_oldest_pending_age_seconds", "Age of the oldest pending buffered write; 0 when none."),
		pending:    g("obsops_site_buffer_pending", "Buffered writes waiting for a worker."),
		retry:      g("obsops_site_buffer_retry", "Buffered writes waiting for a retry (e.g. the main database unreachable)."),
		dead:       g("obsops_site_buffer_dead_letters", "Archived buffered writes: permanently invalid, kept with their error (ingest admin dead-letters)."),
	}
}

func (m *Monitor) export(s Sample) {
	g := m.gauges
	if g == nil {
		return
	}
	if r := s.Replica; r != nil {
		g.lagBytes.Set(float64(r.LagBytes))
		g.lagSeconds.Set(r.LagSeconds)
		if r.BehindMainBytes != nil {
			g.behindMain.Set(float64(*r.BehindMainBytes))
		}
	}
	if b := s.Buffer; b != nil {
		g.replayRate.Set(b.ReplayRatePerS)
		if b.LastApplyAt != nil {
			g.lastApply.Set(float64(b.LastApplyAt.UnixMilli()) / 1000)
		}
		g.oldest.Set(b.OldestPendingAgeS)
		g.pending.Set(float64(b.Pending))
		g.retry.Set(float64(b.Retry))
		g.dead.Set(float64(b.Archived))
	}
}
