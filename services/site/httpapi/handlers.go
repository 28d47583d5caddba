package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/services/site"
)

type infoOutput struct{ Body site.Info }

func (h *Handlers) getInfo(_ context.Context, _ *struct{}) (*infoOutput, error) {
	return &infoOutput{Body: h.Info}, nil
}

type healthOutput struct {
	Status int `json:"-"`
	Body   site.Health
}

func (h *Handlers) getHealth(ctx context.Context, _ *struct{}) (*healthOutput, error) {
	report := h.Health.Check(ctx)
	status := http.StatusOK
	if report.Status == site.StatusDown {
		status = http.StatusServiceUnavailable
	}
	return &healthOutput{Status: status, Body: report}, nil
}

type bufferStatsOutput struct{ Body site.BufferStats }

func (h *Handlers) getBufferStats(ctx context.Context, _ *struct{}) (*bufferStatsOutput, error) {
	st, err := h.Buffers.Stats(ctx)
	if err != nil {
		return nil, huma.Error503ServiceUnavailable("buffer statistics unavailable: " + err.Error())
	}
	return &bufferStatsOutput{Body: st}, nil
}
