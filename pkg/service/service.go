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
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // PostgreSQL driver for sqlx
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

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
	// UsesDatabase opens the PostgreSQL pool and adds database and migration readiness checks.
	UsesDatabase bool
	// ExpectedMigration is the schema version this build needs (migrations.Latest()); the service
	// is not ready until the database has reached it.
	ExpectedMigration int64
	// ClientAddress works out who is calling, once per request (see ClientAddressFunc). nil:
	// the rule of a service behind the gateway, InternalClient(Common.InternalSecret). The
	// gateway passes its own rule (proxies in front of it).
	ClientAddress ClientAddressFunc
	// RedisOptional leaves Redis out of readiness, for a service that keeps working without it
	// (the gateway's rate limiter fails open) and must not leave the load balancer when it is down.
	RedisOptional bool
	// MetricsAddr, when set, serves /metrics on its own listener instead of the main one: for the
	// gateway, whose main listener is public.
	MetricsAddr string
	// NoOpenAPI serves no OpenAPI document of the service's own at /openapi.json (the gateway
	// serves the merged document of all services there).
	NoOpenAPI bool
}

// Service is a running obsops service and the dependencies it owns.
type Service struct {
	Name    string               // short name, as in Options
	Build   Build                // the running binary
	Log     *slog.Logger         // JSON log to stderr, with the service's name on every line
	App     *fiber.App           // the HTTP server, chassis middleware and endpoints installed
	API     huma.API             // the OpenAPI-documented API on App
	DB      *sqlx.DB             // nil unless Options.UsesDatabase
	Redis   *redis.Client        // always opened; in readiness unless Options.RedisOptional
	Metrics *prometheus.Registry // served at /metrics (on Options.MetricsAddr when set)
	Common  config.Common        // the shared settings the service was built with

	addr        string
	metricsAddr string // empty: /metrics is on the main listener
	logs        *logWriter
	draining    atomic.Bool
	mu          sync.Mutex
	checks      []check
	hooks       []hook
}

type check struct {
	name string
	fn   func(context.Context) error
}

type hook struct {
	name string
	fn   func(context.Context) error
}

// New builds the service: logger, pools, metrics registry, Fiber app with the standard
// middleware, the huma API, and the /healthz, /readyz and /metrics endpoints.
func New(opts Options) (*Service, error) {
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
	s.Redis = redis.NewClient(ropts)
	if !opts.RedisOptional {
		s.AddReadiness("redis", func(ctx context.Context) error { return s.Redis.Ping(ctx).Err() })
	}

	if opts.UsesDatabase {
		if opts.Common.DatabaseURL == "" {
			return nil, &config.Invalid{Var: "OPS_DATABASE_URL", Reason: "required but not set"}
		}
		s.DB, err = OpenDB(opts.Common.DatabaseURL, opts.Common.DBMaxConns)
		if err != nil {
			return nil, err
		}
		s.AddReadiness("database", func(ctx context.Context) error { return s.DB.PingContext(ctx) })
		s.AddReadiness("migrations", func(ctx context.Context) error {
			return checkMigration(ctx, s.DB, opts.ExpectedMigration)
		})
	}

	if opts.ClientAddress == nil {
		opts.ClientAddress = InternalClient(opts.Common.InternalSecret)
	}
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
	s.App.Use(trackRequests(opts.ClientAddress, log, opts.Name, logs, newHTTPMetrics(s.Metrics)),
		recoverPanics(log))
	s.App.Get("/healthz", s.liveness)
	s.App.Get("/readyz", s.readiness)
	if opts.MetricsAddr == "" {
		s.App.Get("/metrics", metricsHandler(s.Metrics))
	} else {
		s.metricsAddr = opts.MetricsAddr
	}

	hc := huma.DefaultConfig(opts.Title, opts.Build.Version)
	hc.Info.Description = opts.Description
	hc.DocsPath = ""     // the gateway serves one offline Swagger UI for the whole suite
	hc.CreateHooks = nil // no $schema links in responses
	if opts.NoOpenAPI {
		hc.OpenAPIPath, hc.SchemasPath = "", ""
	}
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A session JWT from /idp/login or an API token (ops_api_token_...)."},
	}
	s.API = humafiber.NewV2(s.App, hc)
	return s, nil
}

// OpenDB opens a PostgreSQL pool whose idle size equals its open size: with Go's default of two
// idle connections a busy service churns connections and loses most of its throughput.
func OpenDB(dsn string, maxConns int) (*sqlx.DB, error) {
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_DATABASE_URL", Reason: err.Error()}
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
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

// Run serves until ctx is cancelled (SIGTERM in main), then shuts down gracefully: readiness
// turns 503 so load balancers stop sending, in-flight requests drain, hooks run, pools close.
func (s *Service) Run(ctx context.Context) error {
	defer s.logs.flush()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	serveErr := make(chan error, 1)
	var metricsServer *http.Server
	if s.metricsAddr != "" {
		mln, err := net.Listen("tcp", s.metricsAddr)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen %s (metrics): %w", s.metricsAddr, err)
		}
		metricsServer = &http.Server{
			Handler:           promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{Registry: s.Metrics}),
			ReadHeaderTimeout: 5 * time.Second,
		}
		go func() {
			if err := metricsServer.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("metrics: %w", err)
			}
		}()
		s.Log.Info("metrics listening", "addr", mln.Addr().String())
	}
	go func() { serveErr <- s.App.Listener(lingerListener{ln}) }()
	s.Log.Info("listening", "addr", ln.Addr().String(), "version", s.Build.Version, "commit", s.Build.Commit)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		s.closePools()
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
	if metricsServer != nil {
		_ = metricsServer.Shutdown(sctx)
	}
	s.mu.Lock()
	hooks := append([]hook(nil), s.hooks...)
	s.mu.Unlock()
	for _, h := range hooks {
		if err := h.fn(sctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.name, err))
		}
	}
	s.closePools()
	s.Log.Info("stopped")
	return errors.Join(errs...)
}

func (s *Service) closePools() {
	if s.DB != nil {
		_ = s.DB.Close()
	}
	_ = s.Redis.Close()
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
