package site

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/service"
)

// Overall health states reported by /health.
const (
	StatusOK = "ok" // every component ready
	// StatusDegraded: the site's own database and Redis work, but some service is not ready or
	// (a secondary site) the main site's database is unreachable: reads and buffered writes go
	// on, other writes answer 503 until it is back.
	StatusDegraded = "degraded"
	StatusDown     = "down" // the database or Redis is unreachable: nothing can be recorded
)

// ComponentHealth is the state of one dependency or service as seen from the site service.
type ComponentHealth struct {
	Status     string  `json:"status" enum:"ok,fail" doc:"ok when reachable and ready."`
	LatencyMS  float64 `json:"latency_ms"`
	HTTPStatus int     `json:"http_status,omitempty" doc:"Status of the service's /readyz."`
	Version    string  `json:"version,omitempty"`
	Error      string  `json:"error,omitempty" doc:"Why it failed, in general terms: unreachable, timed out, not ready (and which of its checks failed), draining."`
	Detail     string  `json:"detail,omitempty" doc:"The full error (addresses, dial errors): only for an admin's request."`
}

// Health is the suite-wide health report.
type Health struct {
	Status    string                     `json:"status" enum:"ok,degraded,down"`
	Site      string                     `json:"site"`
	CheckedAt time.Time                  `json:"checked_at"`
	Database  ComponentHealth            `json:"database"`
	Redis     ComponentHealth            `json:"redis"`
	Services  map[string]ComponentHealth `json:"services"`
	// Buffer summarises the critical-write buffer (details at /buffer-stats); absent when it
	// could not be read.
	Buffer *BufferSummary `json:"buffer,omitempty"`
	// Main is the main site's database as this site sees it (at the main site: its own).
	Main *database.MainStatus `json:"main,omitempty"`
	// Replica is the local read replica (secondary sites only).
	Replica *ReplicaStatus `json:"replica,omitempty"`
}

// BufferSummary is the part of the buffer statistics an operator checks first: the backlog, how
// old it is, writes waiting for a retry, dead letters, and the last commit.
type BufferSummary struct {
	Pending           int        `json:"pending"`
	Retry             int        `json:"retry"`
	Archived          int        `json:"archived" doc:"Dead letters."`
	OldestPendingAgeS float64    `json:"oldest_pending_age_seconds"`
	LastApplyAt       *time.Time `json:"last_apply_at,omitempty"`
	ReplayRatePerS    float64    `json:"replay_rate_per_second"`
}

// Summary is the part of the statistics /health and /api/site/info carry.
func (st *BufferStats) Summary() *BufferSummary {
	return &BufferSummary{Pending: st.Pending, Retry: st.Retry, Archived: st.Archived,
		OldestPendingAgeS: st.OldestPendingAgeS, LastApplyAt: st.LastApplyAt, ReplayRatePerS: st.ReplayRatePerS}
}

// Checker builds the health report: the site's own dependency checks plus every service's
// readiness endpoint, probed concurrently with a deadline so one hung service cannot hang /health.
type Checker struct {
	Site       string
	Database   func(context.Context) error
	Redis      func(context.Context) error
	Services   map[string]string // name -> base URL
	HTTP       *http.Client
	PerTimeout time.Duration
	// Monitor samples the main link, the replica and the buffer (nil: not reported).
	Monitor *Monitor
	// Secondary: an unreachable main database makes the report degraded (at the main site it
	// is Database, and its failure makes it down).
	Secondary bool
	// CacheFor is how long Cached reuses a report: anonymous /health never fans out to every
	// service more often than this, however many ask.
	CacheFor time.Duration
	Log      *slog.Logger         // failed components, with their full error
	Up       *prometheus.GaugeVec // obsops_site_component_up{component}; nil: not exported

	mu     sync.Mutex // held while a shared check runs: callers meanwhile wait for its report
	last   Health
	lastAt time.Time
}

// NewComponentGauge registers obsops_site_component_up{component} (1 ok, 0 failing; component
// is database, redis or a service name) on reg, for Checker.Up.
func NewComponentGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "obsops_site_component_up",
		Help: "Whether a component was healthy at the last health check (1) or failing (0): database, redis, or a service.",
	}, []string{"component"})
	reg.MustRegister(g)
	return g
}

// Cached returns the last report while it is younger than CacheFor, else checks anew. One check
// runs at a time; callers arriving meanwhile get its report. The check does not end with the
// request that started it (others may be waiting for it).
func (h *Checker) Cached(ctx context.Context) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.lastAt.IsZero() && time.Since(h.lastAt) < h.CacheFor {
		return h.last
	}
	h.last = h.Check(context.WithoutCancel(ctx))
	h.lastAt = time.Now()
	return h.last
}

// Redacted returns the report without the full errors (Detail), as anonymous callers see it:
// which component fails and in general terms why, but no internal address or dial error.
func (r Health) Redacted() Health {
	r.Database.Detail, r.Redis.Detail = "", ""
	if r.Main != nil {
		m := *r.Main
		m.LastError = ""
		r.Main = &m
	}
	r.Services = maps.Clone(r.Services)
	for name, c := range r.Services {
		c.Detail = ""
		r.Services[name] = c
	}
	return r
}

// Check probes everything once.
func (h *Checker) Check(ctx context.Context) Health {
	ctx, cancel := context.WithTimeout(ctx, h.PerTimeout)
	defer cancel()

	type result struct {
		name string
		res  ComponentHealth
	}
	names := make([]string, 0, len(h.Services))
	for name := range h.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(chan result, len(names)+2)
	for _, name := range names {
		go func() { out <- result{name, h.probeService(ctx, h.Services[name])} }()
	}
	go func() { out <- result{"/database", probe(ctx, h.Database)} }()
	go func() { out <- result{"/redis", probe(ctx, h.Redis)} }()

	report := Health{Site: h.Site, CheckedAt: time.Now().UTC(), Services: map[string]ComponentHealth{}}
	for range len(names) + 2 {
		r := <-out
		switch r.name {
		case "/database":
			report.Database = r.res
		case "/redis":
			report.Redis = r.res
		default:
			report.Services[r.name] = r.res
		}
	}
	mainDown := false
	if h.Monitor != nil {
		sample := h.Monitor.Sample(ctx)
		if sample.Buffer != nil {
			report.Buffer = sample.Buffer.Summary()
		}
		report.Main, report.Replica = &sample.Main, sample.Replica
		mainDown = h.Secondary && !sample.Main.Reachable
	}
	report.Status = StatusOK
	for _, s := range report.Services {
		if s.Status != "ok" {
			report.Status = StatusDegraded
		}
	}
	if mainDown {
		report.Status = StatusDegraded
	}
	if report.Database.Status != "ok" || report.Redis.Status != "ok" {
		report.Status = StatusDown
	}
	h.record("database", report.Database)
	h.record("redis", report.Redis)
	for _, name := range names {
		h.record(name, report.Services[name])
	}
	return report
}

// record exports a component's state and logs why it fails.
func (h *Checker) record(name string, c ComponentHealth) {
	if h.Up != nil {
		up := 0.0
		if c.Status == "ok" {
			up = 1
		}
		h.Up.WithLabelValues(name).Set(up)
	}
	if c.Status != "ok" && h.Log != nil {
		h.Log.Warn("health check failed", "component", name, "error", c.Error, "detail", c.Detail)
	}
}

func probe(ctx context.Context, fn func(context.Context) error) ComponentHealth {
	start := time.Now()
	err := fn(ctx)
	c := ComponentHealth{Status: "ok", LatencyMS: millis(time.Since(start))}
	if err != nil {
		c.Status, c.Error, c.Detail = "fail", reason(err), err.Error()
	}
	return c
}

// reason says in general terms why a probe failed, naming no address.
func reason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
		return "timed out"
	}
	return "unreachable"
}

func (h *Checker) probeService(ctx context.Context, baseURL string) ComponentHealth {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/readyz", nil)
	if err != nil {
		return ComponentHealth{Status: "fail", Error: "misconfigured", Detail: err.Error()}
	}
	resp, err := h.HTTP.Do(req)
	c := ComponentHealth{LatencyMS: millis(time.Since(start))}
	if err != nil {
		c.Status, c.Error, c.Detail = "fail", reason(err), err.Error()
		return c
	}
	defer resp.Body.Close()
	c.HTTPStatus = resp.StatusCode
	var r service.Readiness
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<16)).Decode(&r); err != nil {
		c.Status, c.Error, c.Detail = "fail", "unreadable readiness answer", err.Error()
		return c
	}
	c.Version = r.Version
	if resp.StatusCode != http.StatusOK || r.Status != "ready" {
		names, details := failedChecks(r)
		c.Status, c.Error, c.Detail = "fail", r.Status, details
		if names != "" {
			c.Error += ": " + names
		}
		return c
	}
	c.Status = "ok"
	return c
}

// failedChecks names a readiness answer's failed checks ("database, migrations") and gives
// their errors ("database: ...; migrations: ...").
func failedChecks(r service.Readiness) (names, details string) {
	var n, d []string
	for name, c := range r.Checks {
		if c.Status != "ok" {
			n = append(n, name)
			d = append(d, name+": "+c.Error)
		}
	}
	sort.Strings(n)
	sort.Strings(d)
	return strings.Join(n, ", "), strings.Join(d, "; ")
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
