package service

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
)

// CheckResult is the outcome of one readiness check.
type CheckResult struct {
	Status    string  `json:"status"`          // ok or fail
	LatencyMS float64 `json:"latency_ms"`      // how long the check took
	Error     string  `json:"error,omitempty"` // why it failed
}

// Readiness is the body of /readyz; the site service aggregates these in /health.
type Readiness struct {
	Service string                 `json:"service"` // the service's short name
	Status  string                 `json:"status"`  // ready, not_ready or draining
	Version string                 `json:"version"` // the build's version
	Checks  map[string]CheckResult `json:"checks"`  // by dependency: database, redis, migrations, ...
}

func (s *Service) liveness(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "alive", "service": s.Name})
}

func (s *Service) readiness(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	checks := append([]check(nil), s.checks...)
	s.mu.Unlock()

	r := Readiness{Service: s.Name, Status: "ready", Version: s.Build.Version, Checks: map[string]CheckResult{}}
	type outcome struct {
		name string
		res  CheckResult
	}
	results := make(chan outcome, len(checks))
	for _, ch := range checks {
		go func() {
			start := time.Now()
			err := ch.fn(ctx)
			res := CheckResult{Status: "ok", LatencyMS: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				res.Status, res.Error = "fail", err.Error()
			}
			results <- outcome{ch.name, res}
		}()
	}
	for range checks {
		o := <-results
		r.Checks[o.name] = o.res
		if o.res.Status != "ok" {
			r.Status = "not_ready"
		}
	}
	if s.draining.Load() {
		r.Status = "draining"
	}
	if r.Status != "ready" {
		c.Status(fiber.StatusServiceUnavailable)
	}
	return c.JSON(r)
}
