package site

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/obsops/obsops/pkg/service"
)

// Overall health states reported by /health.
const (
	StatusOK       = "ok"       // every component ready
	StatusDegraded = "degraded" // the site's own database and Redis work, some service is not ready
	StatusDown     = "down"     // the database or Redis is unreachable: nothing can be recorded
)

// ComponentHealth is the state of one dependency or service as seen from the site service.
type ComponentHealth struct {
	Status     string  `json:"status" enum:"ok,fail" doc:"ok when reachable and ready."`
	LatencyMS  float64 `json:"latency_ms"`
	HTTPStatus int     `json:"http_status,omitempty" doc:"Status of the service's /readyz."`
	Version    string  `json:"version,omitempty"`
	Error      string  `json:"error,omitempty"`
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
}

// BufferSummary is the part of the buffer statistics an operator checks first: the backlog, how
// old it is, writes waiting for a retry, dead letters, and the last commit.
type BufferSummary struct {
	Pending           int        `json:"pending"`
	Retry             int        `json:"retry"`
	Archived          int        `json:"archived" doc:"Dead letters."`
	OldestPendingAgeS float64    `json:"oldest_pending_age_seconds"`
	LastApplyAt       *time.Time `json:"last_apply_at,omitempty"`
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
	// Buffer reads the buffer statistics (nil: not reported).
	Buffer func(context.Context) (BufferStats, error)
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
	if h.Buffer != nil {
		if st, err := h.Buffer(ctx); err == nil {
			report.Buffer = &BufferSummary{Pending: st.Pending, Retry: st.Retry, Archived: st.Archived,
				OldestPendingAgeS: st.OldestPendingAgeS, LastApplyAt: st.LastApplyAt}
		}
	}
	report.Status = StatusOK
	for _, s := range report.Services {
		if s.Status != "ok" {
			report.Status = StatusDegraded
		}
	}
	if report.Database.Status != "ok" || report.Redis.Status != "ok" {
		report.Status = StatusDown
	}
	return report
}

func probe(ctx context.Context, fn func(context.Context) error) ComponentHealth {
	start := time.Now()
	err := fn(ctx)
	c := ComponentHealth{Status: "ok", LatencyMS: millis(time.Since(start))}
	if err != nil {
		c.Status, c.Error = "fail", err.Error()
	}
	return c
}

func (h *Checker) probeService(ctx context.Context, baseURL string) ComponentHealth {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/readyz", nil)
	if err != nil {
		return ComponentHealth{Status: "fail", Error: err.Error()}
	}
	resp, err := h.HTTP.Do(req)
	c := ComponentHealth{LatencyMS: millis(time.Since(start))}
	if err != nil {
		c.Status, c.Error = "fail", "unreachable: "+err.Error()
		return c
	}
	defer resp.Body.Close()
	c.HTTPStatus = resp.StatusCode
	var r service.Readiness
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<16)).Decode(&r); err != nil {
		c.Status, c.Error = "fail", "unreadable readiness answer: "+err.Error()
		return c
	}
	c.Version = r.Version
	if resp.StatusCode != http.StatusOK || r.Status != "ready" {
		c.Status, c.Error = "fail", fmt.Sprintf("%s: %s", r.Status, failedChecks(r))
		return c
	}
	c.Status = "ok"
	return c
}

func failedChecks(r service.Readiness) string {
	msg := ""
	for name, c := range r.Checks {
		if c.Status != "ok" {
			if msg != "" {
				msg += "; "
			}
			msg += name + ": " + c.Error
		}
	}
	return msg
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
