// Package service is the chassis every obsops binary runs on: configuration-driven Fiber app,
// JSON logs with request ids, Prometheus metrics on an injected registry, liveness and readiness
// endpoints, an OpenAPI-documented huma API, and graceful shutdown.
//
// A service's main builds a Service, registers its routes (routes.go of its HTTP package), adds
// shutdown hooks for what it owns (asynq servers, WebSockets), and calls Run.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/problem"
)

// Build identifies the running binary; main sets it from -ldflags.
type Build struct {
	Version string `json:"version"` // release version, "dev" for a local build
	Commit  string `json:"commit"`  // source commit, "unknown" for a local build
}

// Options describe one service to the chassis.
type Options struct {
	Name        string        // short name: gateway, authtoken, site, ...
	Title       string        // OpenAPI title
	Description string        // OpenAPI description
	Addr        string        // listen address, host:port
	Common      config.Common // the shared OPS_* settings
	Build       Build         // reported in logs, /readyz and the OpenAPI info
	// ClientAddress works out who is calling, once per request (see ClientAddressFunc). nil:
	// the rule of a service behind the gateway, InternalClient(Common.InternalSecret). The
	// gateway passes its own rule (proxies in front of it).
	ClientAddress ClientAddressFunc
}

// Service is a running obsops service and the dependencies it owns.
type Service struct {
	Name    string               // short name, as in Options
	Build   Build                // the running binary
	Log     *slog.Logger         // JSON log to stderr, with the service's name on every line
	App     *fiber.App           // the HTTP server, chassis middleware and endpoints installed
	API     huma.API             // the OpenAPI-documented API on App; nil from NewCore
	Redis   *redis.Client        // always opened; in readiness from New
	Metrics *prometheus.Registry // served at /metrics on the main listener from New
	Common  config.Common        // the shared settings the service was built with

	addr     string
	logs     *logWriter
	draining atomic.Bool
	mu       sync.Mutex
	checks   []check
	hooks    []hook
	closers  []hook
	// rejectAnswer is SetRejectAnswer's choice (nil: the chassis' answers only).
	rejectAnswer func(*fasthttp.RequestHeader, error) *problem.Problem
}

type check struct {
	name string
	fn   func(context.Context) error
}

type hook struct {
	name string
	fn   func(context.Context) error
}

// New builds a domain service: the core (NewCore), plus Redis in readiness, /metrics on the main
// listener and the huma API (API) with the service's own OpenAPI document at /openapi.json. Its
// database, if any, is attached with pkg/database, which only binaries that use one link.
func New(opts Options) (*Service, error) {
	s, err := NewCore(opts)
	if err != nil {
		return nil, err
	}
	s.AddReadiness("redis", func(ctx context.Context) error { return s.Redis.Ping(ctx).Err() })
	s.App.Get("/metrics", metricsHandler(s.Metrics))

	hc := huma.DefaultConfig(opts.Title, opts.Build.Version)
	hc.Info.Description = opts.Description
	hc.DocsPath = ""     // the gateway serves one offline Swagger UI for the whole suite
	hc.CreateHooks = nil // no $schema links in responses
	hc.Transformers = append(hc.Transformers, problem.Transformer(s.Log))
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A session JWT from /idp/login or an API token (ops_api_token_...)."},
	}
	s.API = humafiber.NewV2WithGroup(s.App, headWithGet{s.App}, hc)
	s.API.OpenAPI().OnAddOperation = append(s.API.OpenAPI().OnAddOperation, guardParams(s.API))
	return s, nil
}

// NewCore builds what every binary needs and nothing more: the JSON logger, a metrics registry
// (served by nobody yet), the Redis client (not in readiness), and the Fiber app with the
// chassis middleware (request ids, access log, metrics, panics), problem+json for every error
// (also for requests the HTTP parser rejects, see rejectRequest), /healthz and /readyz. The
// gateway builds on it: it serves its metrics on a listener of its own, its merged OpenAPI
// document, and keeps Redis out of readiness.
func NewCore(opts Options) (*Service, error) {
	logs := newLogWriter(os.Stderr)
	log, err := newLogger(opts.Name, opts.Common.LogLevel, logs)
	if err != nil {
		return nil, err
	}
	s := &Service{
		Name:    opts.Name,
		Build:   opts.Build,
		Log:     log,
		Metrics: prometheus.NewRegistry(),
		Common:  opts.Common,
		addr:    opts.Addr,
		logs:    logs,
	}
	s.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ropts, err := redis.ParseURL(opts.Common.RedisURL)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_REDIS_URL", Reason: err.Error()}
	}
	ropts.PoolSize = 4 * opts.Common.DBMaxConns
	RedisFailFast(ropts)
	s.Redis = redis.NewClient(ropts)
	s.OnClose("redis", func(context.Context) error { return s.Redis.Close() })

	if opts.ClientAddress == nil {
		opts.ClientAddress = InternalClient(opts.Common.InternalSecret)
	}
	problem.InstallHuma()
	s.App = fiber.New(fiber.Config{
		AppName:               opts.Name,
		DisableStartupMessage: true,
		BodyLimit:             opts.Common.BodyLimitBytes,
		ErrorHandler:          problem.ErrorHandler,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		// Fiber trusts no proxy: c.IP() and c.Protocol() describe the connection itself. Who the
		// client is, is ClientAddress's to say (ClientIP).
		EnableTrustedProxyCheck: true,
	})
	metrics := newHTTPMetrics(s.Metrics)
	s.App.Server().ErrorHandler = rejectRequest(s, opts.Common.BodyLimitBytes, metrics)
	s.App.Use(trackRequests(opts.ClientAddress, log, opts.Name, logs, metrics),
		recoverPanics(log))
	s.App.Get("/healthz", s.liveness)
	s.App.Get("/readyz", s.readiness)
	return s, nil
}

// headWithGet is the router huma registers its operations on: every GET route also answers HEAD
// (status and headers, no body: the server drops the body of a HEAD answer), as Fiber's own Get
// does.
type headWithGet struct{ fiber.Router }

// Add registers handlers for method and path, and for HEAD too when method is GET.
func (r headWithGet) Add(method, path string, handlers ...fiber.Handler) fiber.Router {
	if method == fiber.MethodGet {
		r.Router.Add(fiber.MethodHead, path, handlers...)
	}
	return r.Router.Add(method, path, handlers...)
}

// AddReadiness adds a dependency check to /readyz.
func (s *Service) AddReadiness(name string, fn func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, check{name, fn})
}

// OnShutdown registers fn to run after the HTTP server has stopped, in registration order,
// before the pools close (close WebSockets, stop queue servers, flush buffers).
func (s *Service) OnShutdown(name string, fn func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, hook{name, fn})
}

// OnClose registers fn to run last at shutdown, after the hooks of OnShutdown (which may still
// need the pool), in reverse registration order: for the pools the service owns.
func (s *Service) OnClose(name string, fn func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, hook{name, fn})
}

// Run serves until ctx is cancelled (SIGTERM in main), then shuts down gracefully: readiness
// turns 503 so load balancers stop sending, in-flight requests drain, hooks run, pools close.
func (s *Service) Run(ctx context.Context) error {
	defer s.logs.flush()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.App.Listener(lingerListener{ln}) }()
	if s.Common.PprofAddr != "" {
		stop, err := servePprof(s.Common.PprofAddr, s.Log)
		if err != nil {
			_ = s.App.Shutdown()
			return err
		}
		defer stop()
	}
	s.Log.Info("listening", "addr", ln.Addr().String(), "version", s.Build.Version, "commit", s.Build.Commit)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		s.closePools(context.Background())
		return fmt.Errorf("serve: %w", err)
	}

	s.draining.Store(true)
	s.Log.Info("draining", "drain", s.Common.ShutdownDrain.String())
	time.Sleep(s.Common.ShutdownDrain)

	sctx, cancel := context.WithTimeout(context.Background(), s.Common.ShutdownTimeout)
	defer cancel()
	var errs []error
	if err := s.App.ShutdownWithContext(sctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	s.mu.Lock()
	hooks := append([]hook(nil), s.hooks...)
	s.mu.Unlock()
	for _, h := range hooks {
		if err := h.fn(sctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.name, err))
		}
	}
	errs = append(errs, s.closePools(sctx))
	s.Log.Info("stopped")
	return errors.Join(errs...)
}

// closePools runs the OnClose functions, last registered first.
func (s *Service) closePools(ctx context.Context) error {
	s.mu.Lock()
	closers := append([]hook(nil), s.closers...)
	s.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", closers[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// newLogger returns the JSON logger of a service, writing to out, at the OPS_LOG_LEVEL level.
func newLogger(service, level string, out io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, &config.Invalid{Var: "OPS_LOG_LEVEL", Reason: err.Error()}
	}
	h := slog.NewJSONHandler(out, &slog.HandlerOptions{Level: lv})
	return slog.New(h).With("service", service), nil
}

// Main runs a binary's run function with a context cancelled by SIGTERM or Ctrl-C, and turns its
// error into one line on stderr and exit status 1: the contract every obsops binary keeps for
// operators (a wrong setting is one line naming the variable).
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// RedisDialRetries, RedisDialBackoff and RedisCommandRetries bound how long a command waits for a
// Redis that refuses connections. go-redis's defaults (5 dial attempts 100 ms apart, within each
// of up to 4 command attempts) made a request wait 1.3–1.6 s for its 503 while Redis was down,
// and a request makes several Redis calls (credential, idempotency, hold); with one dial per
// attempt and one retry 10 ms later, each call fails in about 10 ms. The one retry still rides
// out a connection dropped under a command (a Redis restart); a Redis that is up but slow is
// bounded by each caller's context instead.
const (
	RedisDialRetries    = 1
	RedisDialBackoff    = 10 * time.Millisecond
	RedisCommandRetries = 1
)

// RedisFailFast sets opts so that commands fail at once when Redis refuses connections (see
// RedisDialRetries), and give up at their context's deadline when Redis hangs (accepts
// connections, answers nothing: SIGSTOP, a full disk under appendfsync always); every obsops
// Redis client is made with it. Without ContextTimeoutEnabled go-redis ignores the caller's
// deadline for network I/O and waits ReadTimeout (3 s) per attempt: every bound written as a
// context timeout (OPS_INGEST_REDIS_TIMEOUT, the token cache's 200 ms) was 3–6 s in fact, and a
// buffered write with Redis hung answered 503 after 10–20 s.
func RedisFailFast(opts *redis.Options) {
	opts.DialerRetries = RedisDialRetries
	opts.DialerRetryTimeout = RedisDialBackoff
	opts.MaxRetries = RedisCommandRetries
	opts.MinRetryBackoff = RedisDialBackoff
	opts.MaxRetryBackoff = 2 * RedisDialBackoff
	opts.ContextTimeoutEnabled = true
}
