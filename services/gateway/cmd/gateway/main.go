// Command gateway is the single public entry point of obsops.
package main

import (
	"context"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/gateway"
	"github.com/obsops/obsops/services/gateway/httpapi"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() { service.Main("gateway", run) }

func run(ctx context.Context) error {
	var cfg gateway.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	// The core only: Redis stays out of readiness (the rate limiter fails open), /metrics is on
	// a listener of its own and /openapi.json is the merged document (httpapi.Setup). The server
	// accepts bodies up to the largest route limit; gateway.BodyLimits holds each route to its own.
	common := cfg.Common
	common.BodyLimitBytes = gateway.NewBodyLimits(cfg.BodyLimitBytes, cfg.BulkBodyLimitBytes).Max()
	svc, err := service.NewCore(service.Options{
		Name: "gateway", Title: "obsops", Addr: cfg.Addr, Common: common,
		Build:         service.Build{Version: version, Commit: commit},
		ClientAddress: gateway.ProxyClient(cfg.TrustedProxies, cfg.ProxyHeader),
	})
	if err != nil {
		return err
	}
	if err := httpapi.Setup(svc, &cfg, version); err != nil {
		return err
	}
	return svc.Run(ctx)
}
