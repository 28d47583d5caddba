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
	// The server accepts bodies up to the largest route limit; gateway.BodyLimits holds each
	// route to its own.
	common := cfg.Common
	common.BodyLimitBytes = gateway.NewBodyLimits(cfg.BodyLimitBytes, cfg.BulkBodyLimitBytes).Max()
	svc, err := service.New(service.Options{
		Name: "gateway", Title: "obsops", Addr: cfg.Addr, MetricsAddr: cfg.MetricsAddr, Common: common,
		Build: service.Build{Version: version, Commit: commit},
		Edge:  true, TrustedProxies: cfg.TrustedProxies, ProxyHeader: cfg.ProxyHeader,
		RedisOptional: true, // the rate limiter fails open
		NoOpenAPI:     true, // /openapi.json is the merged document
	})
	if err != nil {
		return err
	}
	if err := httpapi.Setup(svc, &cfg, version); err != nil {
		return err
	}
	return svc.Run(ctx)
}
