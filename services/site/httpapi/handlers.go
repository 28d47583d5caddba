package httpapi

import (
	"context"
	"net/http"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/site"
)

type infoOutput struct{ Body site.Info }

func (h *Handlers) getInfo(_ context.Context, _ *struct{}) (*infoOutput, error) {
	info := h.Info
	info.Status = site.StatusOf(h.Monitor.Latest())
	return &infoOutput{Body: info}, nil
}

type healthOutput struct {
	Status int `json:"-"`
	Body   site.Health
}

// getHealth answers the cached report (Checker.Cached) without its full errors; an admin's
// request (see adminView) gets a fresh report with them.
func (h *Handlers) getHealth(ctx context.Context, _ *struct{}) (*healthOutput, error) {
	var report site.Health
	if p := authn.PrincipalFrom(ctx); p != nil && p.HasRole(authn.RoleAdmin) {
		report = h.Health.Check(ctx)
	} else {
		report = h.Health.Cached(ctx).Redacted()
	}
	status := http.StatusOK
	if report.Status == site.StatusDown {
		status = http.StatusServiceUnavailable
	}
	return &healthOutput{Status: status, Body: report}, nil
}

type bufferStatsOutput struct{ Body site.BufferStats }

func (h *Handlers) getBufferStats(ctx context.Context, _ *struct{}) (*bufferStatsOutput, error) {
	sample := h.Monitor.Sample(ctx)
	if sample.Buffer == nil { // the cause (a Redis address, a dial error) goes to the log only
		return nil, problem.Unavailable.New("buffer statistics are unavailable; retry shortly").WithCause(sample.BufferErr)
	}
	return &bufferStatsOutput{Body: *sample.Buffer}, nil
}

type observatoryOutput struct{ Body site.ObservatoryStatus }

func (h *Handlers) getObservatory(_ context.Context, _ *struct{}) (*observatoryOutput, error) {
	if h.Observatory == nil {
		return nil, problem.NotFound.New("no observatory is watched from this site (OPS_OBSERVATORY_STATUS_URL is set at the main site only)")
	}
	return &observatoryOutput{Body: h.Observatory.Latest()}, nil
}
