package httpapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/gateway"
)

// Setup builds the gateway's parts from cfg on the chassis core svc (service.NewCore): metrics
// on its registry, served on their own listener; the rate limiter on its Redis; closing
// WebSocket tunnels as a shutdown hook. Then it registers the routes.
func Setup(svc *service.Service, cfg *gateway.Config, version string) error {
	if err := gateway.ServeMetrics(svc, cfg.MetricsAddr); err != nil {
		return err
	}
	if cfg.InternalSecret == "" {
		svc.Log.Warn("OPS_INTERNAL_SECRET is not set: the services will take the gateway's own address for every client's (failed-credential budgets, token usage)")
	}
	metrics := gateway.NewMetrics(svc.Metrics)
	tunnels := gateway.NewTunnels(svc.Log, metrics)
	svc.OnShutdown("websocket tunnels", tunnels.CloseAll)

	upstreams := map[string]*gateway.Upstream{}
	for name, base := range cfg.Upstreams.ByService() {
		u, err := gateway.NewUpstream(name, base, cfg.UpstreamTimeout, cfg.DialTimeout,
			gateway.PipelineOptions{Depth: cfg.PipelineDepth, JoinWindow: cfg.PipelineWindow}, tunnels, metrics, cfg.InternalSecret)
		if err != nil {
			return &config.Invalid{Var: "OPS_" + strings.ToUpper(name) + "_URL", Reason: err.Error()}
		}
		upstreams[name] = u
	}
	svc.OnShutdown("upstream connections", func(context.Context) error {
		for _, u := range upstreams {
			u.Close()
		}
		return nil
	})
	docs, err := gateway.NewDocs()
	if err != nil {
		return fmt.Errorf("swagger ui assets: %w", err)
	}
	console, err := gateway.NewConsole()
	if err != nil {
		return fmt.Errorf("console assets: %w", err)
	}
	d := Deps{
		Console:   console,
		Upstreams: upstreams,
		CORS:      gateway.NewCORS(cfg.CORSOrigins),
		OpenAPI:   gateway.NewOpenAPI(gateway.MergeInfo{Title: "obsops", Version: version}, upstreams, cfg.OpenAPICacheTTL, svc.Log, metrics),
		Docs:      docs,
	}
	d.Known = gateway.NewKnownCredentials(gateway.KnownCredentialsCapacity)
	if cfg.RateLimitPerMinute > 0 {
		d.Limiter = gateway.NewRateLimiter(svc.Redis, cfg.RateLimitPerMinute, cfg.RateLimitRedisTimeout, svc.Log, metrics, d.Known)
	}
	d.BodyLimits = gateway.NewBodyLimits(cfg.BodyLimitBytes, cfg.BulkBodyLimitBytes)
	if cfg.RateLimitIngestPerMinute > 0 {
		d.IngestLimiter = gateway.NewRateLimiter(gateway.PrefixedScripter{Scripter: svc.Redis, Prefix: "ingest:"},
			cfg.RateLimitIngestPerMinute, cfg.RateLimitRedisTimeout, svc.Log, metrics, d.Known)
	}
	// A request without a credential may send at most OPS_ANONYMOUS_BODY_LIMIT_BYTES: the
	// server refuses a larger body from its headers, before reading it (anonymous.go).
	anon := gateway.AnonymousBodies{Limit: cfg.AnonymousBodyLimitBytes}
	svc.App.Server().HeaderReceived = anon.HeaderReceived
	svc.SetRejectAnswer(anon.Reject)
	Register(svc.App, d)
	return nil
}
