package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/obsops/obsops/pkg/service"
)

// Metrics are the gateway's own Prometheus series (the chassis already counts every request by
// route and status).
type Metrics struct {
	upstreamErrors  *prometheus.CounterVec
	tunnelsOpen     prometheus.Gauge
	tunnelsTotal    prometheus.Counter
	rateLimited     prometheus.Counter
	rateLimitErrors prometheus.Counter
	openAPIMissing  prometheus.Gauge
	pipelined       *prometheus.CounterVec
	upstreamWrites  *prometheus.CounterVec
}

// NewMetrics registers the gateway's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_gateway_upstream_errors_total",
			Help: "Requests the gateway answered itself because the upstream failed, by service and status (502, 503, 504).",
		}, []string{"service", "status"}),
		tunnelsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "obsops_gateway_websocket_tunnels_open", Help: "WebSocket tunnels open now.",
		}),
		tunnelsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_gateway_websocket_tunnels_total", Help: "WebSocket tunnels opened since start.",
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_gateway_rate_limited_total", Help: "Requests refused with 429 by the rate limiter.",
		}),
		rateLimitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_gateway_rate_limit_errors_total",
			Help: "Rate-limit decisions that failed (Redis unreachable or slow); those requests were let through.",
		}),
		openAPIMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "obsops_gateway_openapi_missing_services",
			Help: "Services whose OpenAPI document was unavailable at the last merge.",
		}),
		pipelined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_gateway_upstream_pipelined_total",
			Help: "Requests sent on an upstream connection that already carried requests in flight (HTTP/1.1 pipelining), by service.",
		}, []string{"service"}),
		upstreamWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_gateway_upstream_writes_total",
			Help: "Writes sending requests to an upstream, by service; requests per write shows how well pipelining batches them.",
		}, []string{"service"}),
	}
	reg.MustRegister(m.pipelined, m.upstreamWrites, m.upstreamErrors, m.tunnelsOpen, m.tunnelsTotal, m.rateLimited, m.rateLimitErrors, m.openAPIMissing)
	return m
}

// ServeMetrics serves the service's registry at /metrics on addr, a listener apart from the
// public one (OPS_GATEWAY_METRICS_ADDR), until the service shuts down.
func ServeMetrics(svc *service.Service, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s (metrics): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(svc.Metrics, promhttp.HandlerOpts{Registry: svc.Metrics}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			svc.Log.Error("metrics listener failed", "error", err.Error())
		}
	}()
	svc.Log.Info("metrics listening", "addr", ln.Addr().String())
	svc.OnShutdown("metrics listener", srv.Shutdown)
	return nil
}
