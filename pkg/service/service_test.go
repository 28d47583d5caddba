package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/testenv"
)

type echoInput struct {
	Body struct {
		Name string `json:"name" minLength:"1" maxLength:"10"`
	}
}

type thingInput struct {
	ID int `path:"id" minimum:"1"`
}

type nearInput struct {
	Name   string  `path:"name"`
	RA     float64 `query:"ra"`
	Filter string  `query:"filter"`
}

type echoOutput struct {
	Body struct {
		Name string `json:"name"`
	}
}

// start runs a chassis service with one huma route (POST /echo) and a slow plain route, against
// a real database and Redis, and returns its base URL and a stop function.
func start(t *testing.T, expectedMigration int64, redisURL string, drain time.Duration) (string, *service.Service, func() error) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	svc, err := service.New(service.Options{
		Name: "probe", Title: "probe", Addr: addr,
		Common: config.Common{
			DatabaseURL: testenv.Database(t), DBMaxConns: 4, RedisURL: redisURL, LogLevel: "error",
			BodyLimitBytes: 4096, ShutdownDrain: drain, ShutdownTimeout: 5 * time.Second,
			InternalSecret: testSecret,
		},
	})
	require.NoError(t, err)
	_, err = database.Attach(svc, expectedMigration)
	require.NoError(t, err)
	huma.Register(svc.API, huma.Operation{Method: http.MethodPost, Path: "/echo"}, func(_ context.Context, in *echoInput) (*echoOutput, error) {
		out := &echoOutput{}
		out.Body.Name = in.Body.Name
		return out, nil
	})
	huma.Register(svc.API, huma.Operation{Method: http.MethodGet, Path: "/things/{id}"}, func(_ context.Context, in *thingInput) (*echoOutput, error) {
		switch in.ID {
		case 1:
			out := &echoOutput{}
			out.Body.Name = "one"
			return out, nil
		case 2:
			return nil, huma.Error404NotFound("thing 2 not found")
		case 3:
			return nil, problem.Conflict.New("thing 3 is busy").WithHeader("Retry-After", "7")
		case 4:
			return nil, errors.New("dial tcp 10.1.2.3:5432: connection refused")
		case 5:
			return nil, huma.Error500InternalServerError("pq: password authentication failed for user obsops")
		default:
			panic("thing " + strconv.Itoa(in.ID))
		}
	})
	huma.Register(svc.API, huma.Operation{Method: http.MethodGet, Path: "/near/{name}"}, func(_ context.Context, in *nearInput) (*echoOutput, error) {
		out := &echoOutput{}
		out.Body.Name = in.Name + " " + strconv.FormatFloat(in.RA, 'g', -1, 64) + " " + in.Filter
		return out, nil
	})
	svc.App.Get("/plain-error", func(*fiber.Ctx) error { return errors.New("redis: 10.9.8.7:6379 refused") })
	svc.App.Get("/plain-panic", func(*fiber.Ctx) error { panic("boom at 10.9.8.7") })
	svc.App.Get("/slow", func(c *fiber.Ctx) error {
		time.Sleep(300 * time.Millisecond)
		return c.SendString("done")
	})
	svc.App.Get("/ip", func(c *fiber.Ctx) error {
		return c.SendString(service.ClientIP(c) + " " + c.Get(contract.InternalSecretHeader))
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}, 5*time.Second, 10*time.Millisecond)
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return base, svc, stop
}

func getJSON(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(into))
	return resp.StatusCode
}

func TestReadinessChecksDatabaseRedisAndMigrations(t *testing.T) {
	rds := testenv.Redis(t)
	base, _, _ := start(t, migrations.Latest(), rds.URL, 0)

	var r service.Readiness
	require.Equal(t, 200, getJSON(t, base+"/readyz", &r))
	require.Equal(t, "ready", r.Status)
	for _, name := range []string{"database", "redis", "migrations"} {
		require.Equal(t, "ok", r.Checks[name].Status, name)
	}

	rds.Kill()
	require.Equal(t, 503, getJSON(t, base+"/readyz", &r))
	require.Equal(t, "not_ready", r.Status)
	require.Equal(t, "fail", r.Checks["redis"].Status)
	require.Equal(t, "ok", r.Checks["database"].Status)
}

func TestReadinessFailsOnOldSchema(t *testing.T) {
	base, _, _ := start(t, migrations.Latest()+1, testenv.Redis(t).URL, 0)
	var r service.Readiness
	require.Equal(t, 503, getJSON(t, base+"/readyz", &r))
	require.Contains(t, r.Checks["migrations"].Error, "run migrate up")
}

func TestRequestIDIsKeptOrMade(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set(service.RequestIDHeader, "abc-123")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "abc-123", resp.Header.Get(service.RequestIDHeader))

	req.Header.Set(service.RequestIDHeader, "bad id <script>")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	got := resp.Header.Get(service.RequestIDHeader)
	require.Len(t, got, 36, "an unsafe id is replaced by a UUID")
}

func TestMetricsUseRouteTemplates(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	resp, err := http.Post(base+"/echo", "application/json", strings.NewReader(`{"name":"a"}`))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), `obsops_http_requests_total{method="POST",route="/echo",status="200"} 1`)
	require.Contains(t, string(b), "go_goroutines")
}

func TestGracefulShutdownDrainsInFlightRequests(t *testing.T) {
	base, svc, stop := start(t, migrations.Latest(), testenv.Redis(t).URL, 200*time.Millisecond)
	hookRan := make(chan struct{})
	svc.OnShutdown("probe-hook", func(context.Context) error { close(hookRan); return nil })

	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- string(b)
	}()
	time.Sleep(50 * time.Millisecond) // the slow request is in flight
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()

	// While draining, readiness says so (load balancers stop sending) but requests still work.
	require.Eventually(t, func() bool {
		var r service.Readiness
		return getJSON(t, base+"/readyz", &r) == 503 && r.Status == "draining"
	}, time.Second, 10*time.Millisecond)
	require.Equal(t, "done", <-slow, "the in-flight request completes")
	require.NoError(t, <-stopped)
	<-hookRan
	_, err := http.Get(base + "/healthz")
	require.Error(t, err, "the listener is closed after shutdown")
}

// testSecret is the internal secret of the chassis services these tests start.
var testSecret = strings.Repeat("s3cr3t", 6)

// TestClientAddressOnlyFromTheInternalSecret: X-Real-IP names the client only on a request that
// carries the internal secret (the gateway's); a spoofed one — from loopback, a private address
// or with a wrong secret — is ignored and the connection's address counts. The secret never
// reaches a handler.
func TestClientAddressOnlyFromTheInternalSecret(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	ip := func(hdr map[string]string) string {
		req, _ := http.NewRequest("GET", base+"/ip", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	require.Equal(t, "127.0.0.1 ", ip(nil), "a direct call: the connection's own address")
	require.Equal(t, "127.0.0.1 ", ip(map[string]string{"X-Real-IP": "203.0.113.9"}), "spoofed without the secret: ignored")
	require.Equal(t, "127.0.0.1 ", ip(map[string]string{"X-Real-IP": "203.0.113.9", contract.InternalSecretHeader: testSecret + "x"}), "wrong secret")
	require.Equal(t, "127.0.0.1 ", ip(map[string]string{"X-Real-IP": "203.0.113.9", contract.InternalSecretHeader: testSecret[:len(testSecret)-1]}), "prefix of the secret")
	require.Equal(t, "203.0.113.9 ", ip(map[string]string{"X-Real-IP": "203.0.113.9", contract.InternalSecretHeader: testSecret}), "with the secret: honoured, and the secret is not passed to the handler")
	require.Equal(t, "2001:db8::1 ", ip(map[string]string{"X-Real-IP": "2001:db8::1", contract.InternalSecretHeader: testSecret}))
	require.Equal(t, "127.0.0.1 ", ip(map[string]string{"X-Real-IP": "not an address", contract.InternalSecretHeader: testSecret}), "a malformed forwarded address is not used")
}

// TestNoSecretTrustsNobody: a service without OPS_INTERNAL_SECRET takes nobody's word for the
// client address, not even a request sending an empty secret.
func TestNoSecretTrustsNobody(t *testing.T) {
	f := service.InternalClient("")
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error {
		client, trusted := f(c)
		return c.SendString(client + " " + map[bool]string{true: "trusted", false: "untrusted"}[trusted])
	})
	for _, secret := range []string{"", "anything"} {
		req, _ := http.NewRequest("GET", "http://probe/", nil)
		req.Header.Set("X-Real-IP", "203.0.113.9")
		req.Header.Set(contract.InternalSecretHeader, secret)
		resp, err := app.Test(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, "0.0.0.0 untrusted", string(b))
	}
}

// TestCoreHasOnlyTheCore: NewCore serves no /metrics and no /openapi.json (the gateway brings
// its own) and leaves Redis out of readiness; New adds all three.
func TestCoreHasOnlyTheCore(t *testing.T) {
	addr := testenv.FreeAddr(t)
	svc, err := service.NewCore(service.Options{
		Name: "edge", Title: "edge", Addr: addr,
		Common: config.Common{RedisURL: "redis://" + testenv.FreeAddr(t) + "/0", DBMaxConns: 1, LogLevel: "error",
			BodyLimitBytes: 4096, ShutdownTimeout: 5 * time.Second},
	})
	require.NoError(t, err)
	require.Nil(t, svc.API)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + addr
	var r service.Readiness
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&r) == nil
	}, 5*time.Second, 10*time.Millisecond, "ready although its Redis is not running")
	require.Empty(t, r.Checks)
	for _, path := range []string{"/metrics", "/openapi.json"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 404, resp.StatusCode, path)
	}

	base2, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	for _, path := range []string{"/metrics", "/openapi.json"} {
		resp, err := http.Get(base2 + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
	}
	require.Equal(t, 200, getJSON(t, base2+"/readyz", &r))
	require.Contains(t, r.Checks, "redis")
}

// OPS_PPROF_ADDR serves Go's profiler on its own listener while the service runs (and only
// there: the service's own port has no /debug route); unset, nothing listens.
func TestProfilerOnlyWhenAsked(t *testing.T) {
	addr, pprofAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	svc, err := service.NewCore(service.Options{
		Name: "edge", Title: "edge", Addr: addr,
		Common: config.Common{RedisURL: "redis://" + testenv.FreeAddr(t) + "/0", DBMaxConns: 1, LogLevel: "error",
			BodyLimitBytes: 4096, ShutdownTimeout: 5 * time.Second, PprofAddr: pprofAddr},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/cmdline")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == 200
	}, 5*time.Second, 10*time.Millisecond)
	require.NotEmpty(t, body)
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)
	cancel()
	require.NoError(t, <-done)
	_, err = http.Get("http://" + pprofAddr + "/debug/pprof/cmdline")
	require.Error(t, err, "the profiler stops with the service")
}

// TestRedisDownFailsFast: with Redis refusing connections, a command on the chassis' client fails
// in well under 0.3 s (go-redis's own dial retries took 1.3–1.6 s), so a request that needs Redis
// gets its 503 at once.
func TestRedisDownFailsFast(t *testing.T) {
	svc, err := service.NewCore(service.Options{
		Name: "fast", Title: "fast", Addr: testenv.FreeAddr(t),
		Common: config.Common{RedisURL: "redis://" + testenv.FreeAddr(t) + "/0", DBMaxConns: 4, LogLevel: "error",
			BodyLimitBytes: 4096, ShutdownTimeout: 5 * time.Second},
	})
	require.NoError(t, err)
	for range 5 {
		start := time.Now()
		err := svc.Redis.Set(context.Background(), "k", "v", 0).Err()
		took := time.Since(start)
		require.Error(t, err, "nothing listens there")
		require.Less(t, took, 300*time.Millisecond, "a refused Redis answers in %s", took)
	}
}

// TestRunWithLoops: the loops run beside the server and stop at shutdown, after the hooks
// registered before them; a loop that fails stops the server and its error is returned.
func TestRunWithLoops(t *testing.T) {
	newSvc := func() *service.Service {
		svc, err := service.NewCore(service.Options{
			Name: "loops", Title: "loops", Addr: testenv.FreeAddr(t),
			Common: config.Common{RedisURL: "redis://" + testenv.FreeAddr(t) + "/0", DBMaxConns: 1, LogLevel: "error",
				BodyLimitBytes: 4096, ShutdownTimeout: 5 * time.Second},
		})
		require.NoError(t, err)
		return svc
	}

	svc := newSvc()
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	svc.OnShutdown("earlier hook", func(context.Context) error { note("hook"); return nil })
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- svc.RunWithLoops(ctx, service.Loop{Name: "worker", Run: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			note("loop stopped")
			return nil
		}})
	}()
	<-started
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []string{"hook", "loop stopped"}, order, "the loop keeps working until the server has shut down")

	failed := errors.New("queue lost")
	start := time.Now()
	err := newSvc().RunWithLoops(context.Background(), service.Loop{Name: "worker", Run: func(context.Context) error { return failed }})
	require.ErrorIs(t, err, failed, "a failed loop stops the service with its error")
	require.Contains(t, err.Error(), "worker: queue lost")
	require.Less(t, time.Since(start), 5*time.Second)
}
