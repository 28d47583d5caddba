package gateway_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fws "github.com/fasthttp/websocket"
	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/gateway"
)

// fakeTransfer stands in for the transfer service (which has no routes yet): a real WebSocket
// endpoint, a slow endpoint, an endpoint echoing what the gateway forwarded, and an OpenAPI
// document whose Problem differs from the chassis' one and that lists an internal path.
func fakeTransfer(t *testing.T) string {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/readyz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ready"}) })
	app.Get("/api/transfer/ws/overview", websocket.New(func(c *websocket.Conn) {
		first := fmt.Sprintf(`{"type":"snapshot","seq":1,"host":%q}`, c.Headers("Host"))
		if err := c.WriteMessage(websocket.TextMessage, []byte(first)); err != nil {
			return
		}
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, msg); err != nil {
				return
			}
		}
	}))
	app.Get("/api/transfer/slow", func(c *fiber.Ctx) error {
		time.Sleep(3 * time.Second)
		return c.SendString("late")
	})
	app.All("/api/transfer/echo", func(c *fiber.Ctx) error {
		if ms := c.QueryInt("delay_ms"); ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		return c.JSON(fiber.Map{
			"request_id": c.Get("X-Request-ID"), "forwarded_for": c.Get("X-Forwarded-For"),
			"method": c.Method(), "path": c.Path(), "body_len": len(c.Body()),
		})
	})
	app.Get("/openapi.json", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{
			"openapi": "3.1.0",
			"info":    fiber.Map{"title": "obsops transfer (fake)", "version": "test"},
			"paths": fiber.Map{
				"/api/transfer/overview": fiber.Map{"get": fiber.Map{
					"operationId": "get-overview",
					"responses": fiber.Map{"default": fiber.Map{"description": "err", "content": fiber.Map{
						"application/problem+json": fiber.Map{"schema": fiber.Map{"$ref": "#/components/schemas/Problem"}}}}},
				}},
				"/internal/secret": fiber.Map{"get": fiber.Map{"operationId": "secret", "responses": fiber.Map{}}},
			},
			"components": fiber.Map{"schemas": fiber.Map{
				"Problem": fiber.Map{"type": "object", "properties": fiber.Map{"transfer_only": fiber.Map{"type": "string"}}},
			}},
		})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(time.Second) })
	return "http://" + ln.Addr().String()
}

// startGateway runs one more gateway binary against the suite's services with extra settings and
// returns its URL and process.
func startGateway(t *testing.T, s *testenv.Suite, extra map[string]string) (string, *testenv.Process) {
	t.Helper()
	env := map[string]string{}
	for k, v := range s.Env {
		env[k] = v
	}
	addr := testenv.FreeAddr(t)
	env["OPS_GATEWAY_ADDR"] = addr
	env["OPS_GATEWAY_METRICS_ADDR"] = testenv.FreeAddr(t)
	for k, v := range extra {
		env[k] = v
	}
	p := testenv.Start(t, "gateway-"+addr, testenv.Binary(t, "gateway"), env)
	testenv.WaitReady(t, p, "http://"+addr+"/readyz", 30*time.Second)
	return "http://" + addr, p
}

type problemBody struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
}

var client = &http.Client{Timeout: 10 * time.Second}

func do(t *testing.T, method, url string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// rawGet sends path exactly as given (no client-side cleaning) and returns status, headers, body.
func rawGet(t *testing.T, base, path string) (int, http.Header, []byte) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufioReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func requireProblem(t *testing.T, resp *http.Response, body []byte, status int) problemBody {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, "body: %s", body)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "body: %s", body)
	var p problemBody
	require.NoError(t, json.Unmarshal(body, &p), "body: %s", body)
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Title)
	require.True(t, strings.HasPrefix(p.Type, problem.TypePrefix), "type %q", p.Type)
	require.NotEmpty(t, p.Detail)
	require.NotEmpty(t, p.Instance)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "every problem carries the request id")
	return p
}

func TestGatewayEndToEnd(t *testing.T) {
	transferURL := fakeTransfer(t)
	s := testenv.StartSuite(t, testenv.SuiteOptions{
		Skip: []string{"transfer"},
		Env: map[string]string{
			"OPS_TRANSFER_URL":          transferURL,
			"OPS_UPSTREAM_TIMEOUT":      "500ms",
			"OPS_CORS_ORIGINS":          "https://ops.example.org, http://localhost:5173",
			"OPS_RATE_LIMIT_PER_MINUTE": "100000",
			"OPS_BODY_LIMIT_BYTES":      "4096",
			"OPS_OPENAPI_CACHE_TTL":     "1s",
		},
	})
	gw := s.GatewayURL

	t.Run("routes to the real site service", func(t *testing.T) {
		resp, body := do(t, "GET", gw+"/api/site/info", nil, nil)
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
		require.Empty(t, resp.Header.Get("Server"), "the upstream's Server header is not passed on")
		var info map[string]any
		require.NoError(t, json.Unmarshal(body, &info))
		require.NotEmpty(t, info)

		resp, body = do(t, "GET", gw+"/health", nil, nil)
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		require.Contains(t, string(body), `"services"`)
	})

	t.Run("request id in and out", func(t *testing.T) {
		id := "e2e-req-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		resp, _ := do(t, "GET", gw+"/api/site/info", nil, map[string]string{"X-Request-ID": id})
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, id, resp.Header.Get("X-Request-ID"))
		// the same id reached the site service: it is in the site's access log
		require.Eventually(t, func() bool { return strings.Contains(s.Procs["site"].Output(), id) }, 3*time.Second, 20*time.Millisecond)

		// and it is what the upstream received
		resp, body := do(t, "GET", gw+"/api/transfer/echo", nil, map[string]string{"X-Request-ID": id + "-2"})
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		var echo struct {
			RequestID    string `json:"request_id"`
			ForwardedFor string `json:"forwarded_for"`
		}
		require.NoError(t, json.Unmarshal(body, &echo))
		require.Equal(t, id+"-2", echo.RequestID)
		require.Equal(t, "127.0.0.1", echo.ForwardedFor)
		require.Equal(t, id+"-2", resp.Header.Get("X-Request-ID"))

		// no id (or a malformed one): the gateway makes one, sends it upstream and back
		resp, body = do(t, "GET", gw+"/api/transfer/echo", nil, map[string]string{"X-Request-ID": "bad id\twith spaces"})
		require.NoError(t, json.Unmarshal(body, &echo))
		require.Regexp(t, `^[0-9a-f-]{36}$`, echo.RequestID)
		require.Equal(t, echo.RequestID, resp.Header.Get("X-Request-ID"))

		// problems the gateway answers itself carry it too
		resp, _ = do(t, "GET", gw+"/nowhere", nil, map[string]string{"X-Request-ID": id + "-3"})
		require.Equal(t, 404, resp.StatusCode)
		require.Equal(t, id+"-3", resp.Header.Get("X-Request-ID"))
	})

	t.Run("unknown, internal and lookalike paths get the gateway's 404 problem", func(t *testing.T) {
		for _, p := range []string{
			"/nowhere", "/internal", "/internal/x", "/INTERNAL/x", "/Internal/ops/reset",
			"/sourcesX", "/sourcesX/1", "/api/sitex/info", "/healthX", "/buffer-statsX", "/metricsX",
			"/api/site/metrics/../../metrics",
			"/api/site/../metrics", "/api/site/../../metrics", "/api/site/./info", "/api/site/%2e%2e/metrics",
			"/api/site/%2E%2E/%2E%2E/internal/x", "/api/site/..%2fmetrics", "/sources/../internal/x",
			"/api/site/info/..", "/api/transfer/%2e%2e/%2e%2e/healthz", "/api/site/%zz",
		} {
			status, hdr, body := rawGet(t, gw, p)
			require.Equal(t, 404, status, "%s: %s", p, body)
			require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), p)
			var pb problemBody
			require.NoError(t, json.Unmarshal(body, &pb), p)
			require.Equal(t, 404, pb.Status, p)
			require.Contains(t, pb.Detail, "no route", p)
			require.NotContains(t, string(body), "go_goroutines", p)
		}
		// /healthz, /readyz and /metrics are the gateway's own, never a service's
		for _, p := range []string{"/healthz", "/readyz"} {
			status, _, body := rawGet(t, gw, p)
			require.Equal(t, 200, status, p)
			require.Contains(t, string(body), `"service":"gateway"`, p)
		}
		status, _, body := rawGet(t, gw, "/metrics")
		require.Equal(t, 404, status, "the gateway's metrics are not on its public listener")
		status, _, body = rawGet(t, "http://"+s.Env["OPS_GATEWAY_METRICS_ADDR"], "/metrics")
		require.Equal(t, 200, status)
		require.Contains(t, string(body), `obsops_http_requests_total`)
		require.NotContains(t, string(body), `route="/api/site/info"`+`,status="200"}`+" 0")
		require.Regexp(t, regexp.MustCompile(`obsops_gateway_upstream_errors_total|obsops_gateway_websocket_tunnels_open`), string(body))
	})

	t.Run("wrong method: 405 problem from the gateway or the service", func(t *testing.T) {
		resp, body := do(t, "POST", gw+"/openapi.json", nil, nil)
		requireProblem(t, resp, body, 405)
		resp, body = do(t, "DELETE", gw+"/api/site/info", nil, nil)
		requireProblem(t, resp, body, 405)
	})

	t.Run("oversize body: 413 problem", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 64<<10)
		resp, body := do(t, "POST", gw+"/api/transfer/echo", bytes.NewReader(big), map[string]string{"Content-Type": "application/json"})
		p := requireProblem(t, resp, body, 413)
		require.Contains(t, p.Detail, "4096")
		// just under the limit passes
		small := bytes.Repeat([]byte("x"), 4000)
		resp, body = do(t, "POST", gw+"/api/transfer/echo", bytes.NewReader(small), nil)
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		require.Contains(t, string(body), `"body_len":4000`)
	})

	t.Run("malformed JSON to a real service: 4xx problem", func(t *testing.T) {
		op := findJSONWriteOperation(t, gw)
		if op.path == "" {
			t.Skip("no real service has a JSON request body yet (only GET routes so far)")
		}
		resp, body := do(t, op.method, gw+op.path, strings.NewReader(`{"name": "x",`), map[string]string{"Content-Type": "application/json"})
		require.GreaterOrEqual(t, resp.StatusCode, 400, "%s %s: %s", op.method, op.path, body)
		require.Less(t, resp.StatusCode, 500, "%s %s: %s", op.method, op.path, body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		if !op.secured {
			require.Contains(t, []int{400, 422}, resp.StatusCode, "%s", body)
		}
	})

	t.Run("CORS", func(t *testing.T) {
		pre := map[string]string{
			"Origin": "https://ops.example.org", "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
		}
		resp, body := do(t, "OPTIONS", gw+"/api/tokens/", nil, pre)
		require.Equal(t, 204, resp.StatusCode, "%s", body)
		require.Equal(t, "https://ops.example.org", resp.Header.Get("Access-Control-Allow-Origin"))
		for _, h := range []string{"Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID"} {
			require.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), h)
		}
		require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "POST")
		require.Contains(t, resp.Header.Get("Vary"), "Origin")

		pre["Origin"] = "https://evil.example.com"
		resp, body = do(t, "OPTIONS", gw+"/api/tokens/", nil, pre)
		requireProblem(t, resp, body, 403)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

		resp, _ = do(t, "GET", gw+"/api/site/info", nil, map[string]string{"Origin": "http://localhost:5173"})
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-ID")
		require.Contains(t, resp.Header.Get("Access-Control-Expose-Headers"), "Retry-After")

		resp, body = do(t, "GET", gw+"/nowhere", nil, map[string]string{"Origin": "http://localhost:5173"})
		requireProblem(t, resp, body, 404)
		require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"), "problems carry CORS headers too")

		resp, _ = do(t, "GET", gw+"/api/site/info", nil, map[string]string{"Origin": "https://evil.example.com"})
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
		resp, _ = do(t, "GET", gw+"/api/site/info", nil, nil)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	})

	t.Run("slow upstream: 504 problem at the upstream timeout", func(t *testing.T) {
		start := time.Now()
		resp, body := do(t, "GET", gw+"/api/transfer/slow", nil, nil)
		elapsed := time.Since(start)
		p := requireProblem(t, resp, body, 504)
		require.Contains(t, p.Detail, "transfer")
		require.Less(t, elapsed, 1500*time.Millisecond)
		require.GreaterOrEqual(t, elapsed, 400*time.Millisecond)
	})

	t.Run("pipelined reads each get their own answer", func(t *testing.T) {
		metrics := "http://" + s.Env["OPS_GATEWAY_METRICS_ADDR"] + "/metrics"
		before := counter(t, metrics, `obsops_gateway_upstream_pipelined_total{service="transfer"}`)
		const workers, each = 32, 40
		var wg sync.WaitGroup
		errs := make(chan string, workers*each)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id := fmt.Sprintf("pipe-%d-%d", w, i)
					req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/transfer/echo?delay_ms=%d", gw, i%3), nil)
					req.Header.Set("X-Request-ID", id)
					resp, err := client.Do(req)
					if err != nil {
						errs <- err.Error()
						continue
					}
					var echo struct {
						RequestID string `json:"request_id"`
					}
					err = json.NewDecoder(resp.Body).Decode(&echo)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 || echo.RequestID != id || resp.Header.Get("X-Request-ID") != id {
						errs <- fmt.Sprintf("%s: status %d, echoed %q, header %q, %v", id, resp.StatusCode, echo.RequestID, resp.Header.Get("X-Request-ID"), err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		after := counter(t, metrics, `obsops_gateway_upstream_pipelined_total{service="transfer"}`)
		require.Greater(t, after, before, "under this load some reads share connections")
	})

	t.Run("a slow read does not hold up others at low load", func(t *testing.T) {
		slow := make(chan int, 1)
		go func() {
			resp, err := client.Get(gw + "/api/transfer/slow")
			if err != nil {
				slow <- 0
				return
			}
			resp.Body.Close()
			slow <- resp.StatusCode
		}()
		// Reads sent right behind it (within the pipelining window) and later ones all get
		// connections of their own: three at a time is not load.
		time.Sleep(time.Millisecond)
		for round := range 5 {
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					resp, err := client.Get(gw + "/api/transfer/echo")
					if !assert.NoError(t, err) {
						return
					}
					resp.Body.Close()
					assert.Equal(t, 200, resp.StatusCode)
					assert.Less(t, time.Since(start), 300*time.Millisecond, "round %d", round)
				}()
			}
			wg.Wait()
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, 504, <-slow)
	})

	t.Run("WebSocket tunnel", func(t *testing.T) {
		wsURL := "ws" + strings.TrimPrefix(gw, "http") + "/api/transfer/ws/overview"
		conn, resp, err := fws.DefaultDialer.Dial(wsURL, http.Header{"X-Request-ID": {"ws-e2e-1"}})
		require.NoError(t, err)
		defer conn.Close()
		require.Equal(t, 101, resp.StatusCode)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		mt, msg, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, fws.TextMessage, mt)
		upstreamHost := strings.TrimPrefix(transferURL, "http://")
		require.JSONEq(t, `{"type":"snapshot","seq":1,"host":"`+upstreamHost+`"}`, string(msg),
			"the frame the upstream sent right after its 101 arrives; the handshake named the upstream as Host")

		for _, size := range []int{1, 125, 126, 65535, 65536, 300 << 10} {
			payload := bytes.Repeat([]byte{byte('a' + size%26)}, size)
			require.NoError(t, conn.WriteMessage(fws.BinaryMessage, payload))
			mt, msg, err := conn.ReadMessage()
			require.NoError(t, err, "size %d", size)
			require.Equal(t, fws.BinaryMessage, mt)
			require.Equal(t, payload, msg, "size %d", size)
		}
		require.NoError(t, conn.WriteControl(fws.CloseMessage, fws.FormatCloseMessage(fws.CloseNormalClosure, "bye"), time.Now().Add(time.Second)))
		_, _, err = conn.ReadMessage()
		require.True(t, fws.IsCloseError(err, fws.CloseNormalClosure), "got %v", err)

		// the upgrade went through the access log as a 101 with its request id
		require.Eventually(t, func() bool {
			out := s.Procs["gateway"].Output()
			return strings.Contains(out, `"request_id":"ws-e2e-1"`) && strings.Contains(out, `"status":101`)
		}, 3*time.Second, 20*time.Millisecond)
	})

	t.Run("WebSocket upgrade refused by the upstream is relayed", func(t *testing.T) {
		wsURL := "ws" + strings.TrimPrefix(gw, "http") + "/api/site/info"
		_, resp, err := fws.DefaultDialer.Dial(wsURL, nil)
		require.ErrorIs(t, err, fws.ErrBadHandshake)
		require.NotNil(t, resp)
		require.Equal(t, 200, resp.StatusCode, "the site answered the GET normally")
		require.NotEmpty(t, resp.Header.Get("X-Request-ID"))
	})

	t.Run("merged OpenAPI document", func(t *testing.T) {
		resp, body := do(t, "GET", gw+"/openapi.json", nil, nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
		var doc struct {
			OpenAPI    string                    `json:"openapi"`
			Info       map[string]any            `json:"info"`
			Servers    []map[string]any          `json:"servers"`
			Paths      map[string]map[string]any `json:"paths"`
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
			Services    map[string]map[string]any `json:"x-obsops-services"`
			Unavailable []string                  `json:"x-obsops-unavailable"`
		}
		require.NoError(t, json.Unmarshal(body, &doc), "%s", body)
		require.Equal(t, "3.1.0", doc.OpenAPI)
		require.Equal(t, "obsops", doc.Info["title"])
		require.Equal(t, "/", doc.Servers[0]["url"])
		for _, p := range []string{"/api/site/info", "/health", "/buffer-stats", "/api/transfer/overview"} {
			require.Contains(t, doc.Paths, p)
		}
		for p := range doc.Paths {
			require.NotContains(t, []string{"/healthz", "/readyz", "/metrics", "/internal/secret"}, p)
		}
		for _, name := range []string{"authtoken", "catalog", "ingest", "site", "transfer"} {
			require.Equal(t, "ok", doc.Services[name]["status"], name)
		}
		require.Empty(t, doc.Unavailable)
		// the fake transfer's Problem differs from the chassis' one: renamed, not clobbered
		require.Contains(t, doc.Components.Schemas, "Problem")
		require.Contains(t, doc.Components.Schemas, "transfer_Problem")
		require.NotContains(t, fmt.Sprint(doc.Components.Schemas["Problem"]), "transfer_only")
		require.Contains(t, string(body), `"$ref":"#/components/schemas/transfer_Problem"`)
	})

	t.Run("docs render from local assets only", func(t *testing.T) {
		resp, body := do(t, "GET", gw+"/docs", nil, nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
		html := string(body)
		require.Contains(t, html, `id="swagger-ui"`)
		require.NotRegexp(t, `(?i)(https?:)?//[a-z0-9]`, html, "no external URL in the page")
		refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(html, -1)
		require.GreaterOrEqual(t, len(refs), 4)
		sawJS, sawCSS := false, false
		for _, m := range refs {
			ref := m[1]
			require.True(t, strings.HasPrefix(ref, "/docs/"), "asset %s is local", ref)
			resp, body := do(t, "GET", gw+ref, nil, nil)
			require.Equal(t, 200, resp.StatusCode, ref)
			require.Greater(t, len(body), 0, ref)
			switch {
			case strings.HasSuffix(ref, ".js"):
				sawJS = true
				require.Contains(t, resp.Header.Get("Content-Type"), "javascript", ref)
			case strings.HasSuffix(ref, ".css"):
				sawCSS = true
				require.Contains(t, resp.Header.Get("Content-Type"), "text/css", ref)
			}
		}
		require.True(t, sawJS && sawCSS)
		_, init := do(t, "GET", gw+"/docs/swagger-initializer.js", nil, nil)
		require.Contains(t, string(init), `url: "/openapi.json"`)
		require.Contains(t, string(init), `validatorUrl: null`)
		require.NotRegexp(t, `https?://`, string(init))
		_, bundle := do(t, "GET", gw+"/docs/swagger-ui-bundle.js", nil, nil)
		require.Greater(t, len(bundle), 500_000, "the real Swagger UI bundle")
		for _, p := range []string{"/docs/", "/docs/index.html"} {
			resp, _ := do(t, "GET", gw+p, nil, nil)
			require.Equal(t, 200, resp.StatusCode, p)
		}
		resp, body = do(t, "GET", gw+"/docs/nope.js", nil, nil)
		requireProblem(t, resp, body, 404)
	})

	t.Run("docs render in a headless browser without internet", func(t *testing.T) {
		browser, err := exec.LookPath("chromium")
		if err != nil {
			t.Skip("chromium not installed: make test installs it (deploy/local/stack.sh test-deps)")
		}
		// every host but loopback fails to resolve: a CDN reference could not load
		cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--disable-extensions", "--disable-background-networking", "--user-data-dir="+t.TempDir(),
			"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
			"--virtual-time-budget=10000", "--dump-dom", gw+"/docs")
		out, err := runWithTimeout(cmd, 60*time.Second)
		require.NoError(t, err, "%s", out)
		dom := string(out)
		require.Contains(t, dom, "swagger-ui", "%s", dom)
		require.Contains(t, dom, "/api/site/info", "the operations of the merged document are rendered")
		require.Contains(t, dom, "opblock", "operation blocks are rendered")
	})

	t.Run("rate limit per verified credential, else per address, with Retry-After", func(t *testing.T) {
		limited, _ := startGateway(t, s, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "5"})
		alice := "Bearer " + s.JWT(t, "alice")
		me := func(from, auth string) *http.Response {
			return getFrom(t, from, limited+"/auth/me", map[string]string{"Authorization": auth})
		}
		// alice's first request counts against her address; once authtoken has verified her
		// JWT it has a budget of its own (5 more), then 429.
		resp := me("127.0.0.4", alice)
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Get("X-Obsops-Credential-Verified"), "the services' marker stays inside")
		for i := range 5 {
			resp := me("127.0.0.4", alice)
			require.Equal(t, 200, resp.StatusCode, "request %d", i+1)
			require.Equal(t, strconv.Itoa(4-i), resp.Header.Get("X-RateLimit-Remaining"))
		}
		resp = me("127.0.0.4", alice)
		require.Equal(t, 429, resp.StatusCode)
		// Her other credentials share her budget: a second session JWT of alice's, once
		// verified, is refused too (its first request counts against another address's budget).
		alice2 := "Bearer " + s.JWT(t, "alice")
		require.NotEqual(t, alice, alice2)
		require.Equal(t, 200, me("127.0.0.5", alice2).StatusCode)
		require.Equal(t, 429, me("127.0.0.5", alice2).StatusCode, "one user's credentials share one budget")
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After is whole seconds: %q", resp.Header.Get("Retry-After"))
		require.True(t, ra >= 1 && ra <= 120, "Retry-After %d", ra)

		// Credentials that never verify share their address's budget (4 left at 127.0.0.4):
		// rotating them buys nothing, and Redis gets no key for any of them.
		var junk []string
		for i := range 6 {
			junk = append(junk, fmt.Sprintf("Bearer ops_api_token_junk-%d", i))
		}
		for i, j := range junk {
			resp := me("127.0.0.4", j)
			if i < 4 {
				require.Equal(t, 401, resp.StatusCode, "junk %d", i)
			} else {
				require.Equal(t, 429, resp.StatusCode, "junk %d: the address's budget is spent", i)
			}
		}
		// anonymous callers are limited by address too
		for i := range 5 {
			resp := getFrom(t, "127.0.0.2", limited+"/api/site/info", nil)
			require.Equal(t, 200, resp.StatusCode, "request %d from 127.0.0.2", i+1)
		}
		resp = getFrom(t, "127.0.0.2", limited+"/api/site/info", nil)
		require.Equal(t, 429, resp.StatusCode)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		resp = getFrom(t, "127.0.0.3", limited+"/api/site/info", nil)
		require.Equal(t, 200, resp.StatusCode, "another address has its own budget")

		// counters are keyed by a verified credential's account, never the secret itself, and
		// never by an unverified one
		keys, err := s.Redis.Client().Keys(t.Context(), "ops:ratelimit:*").Result()
		require.NoError(t, err)
		found := false
		for _, k := range keys {
			require.NotContains(t, k, "junk")
			require.NotContains(t, k, strings.TrimPrefix(alice, "Bearer "))
			for _, j := range junk {
				js := sha256.Sum256([]byte(j))
				require.NotContains(t, k, hex.EncodeToString(js[:]))
			}
			found = found || strings.Contains(k, "{acct:")
		}
		require.True(t, found, "keys: %v", keys)

		// /docs and /openapi.json are behind the limiter too (127.0.0.2 spent its budget)
		require.Equal(t, 429, getFrom(t, "127.0.0.2", limited+"/openapi.json", nil).StatusCode)
		require.Equal(t, 429, getFrom(t, "127.0.0.2", limited+"/docs", nil).StatusCode)
	})

	t.Run("anonymous callers: small bodies, never the ingest budget", func(t *testing.T) {
		limited, _ := startGateway(t, s, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "10"})
		// A 16 MiB body without a credential is refused from its headers: 401 on a route that
		// needs a credential, 413 elsewhere; the answer comes before the body is sent (the
		// client may see the answer or a reset connection while still writing, never a 200).
		big := strings.Repeat("x", 16<<20)
		for _, c := range []struct {
			method, path string
			status       int
		}{{"POST", "/raw_data_files/bulk", 401}, {"POST", "/observing_program/", 401}, {"POST", "/health", 413}} {
			req, err := http.NewRequest(c.method, limited+c.path, strings.NewReader(big))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil { // the server closed the connection while the body was still going out
				t.Logf("%s %s: %v", c.method, c.path, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, c.status, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
			require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"))
		}
		// Over the anonymous limit but within the default, with a raw request whose body is
		// never sent: the answer comes from the headers alone.
		conn, err := net.Dial("tcp", strings.TrimPrefix(limited, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		_, err = fmt.Fprintf(conn, "POST /raw_data_files/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		head, err := bufioReader(conn).ReadString('\n')
		require.NoError(t, err, "the gateway answers before the body arrives")
		require.Contains(t, head, "401")
		// A small anonymous body still reaches the service (which answers 401 itself).
		resp, _ := do(t, "POST", s.GatewayURL+"/raw_data_files/", strings.NewReader(`{}`), map[string]string{"Content-Type": "application/json"})
		require.Equal(t, 401, resp.StatusCode)

		// Anonymous requests to the ingest routes count against the address's default budget
		// (10 per minute here), not the ingest class's 600,000.
		for i := range 12 {
			resp := getFrom(t, "127.0.0.9", limited+"/raw_data_files/0192f1c8-0000-7000-8000-000000000001", nil)
			if i < 10 {
				require.Equal(t, 401, resp.StatusCode, "request %d", i+1)
			} else {
				require.Equal(t, 429, resp.StatusCode, "request %d: anonymous callers keep the default budget", i+1)
			}
		}
	})

	t.Run("rate limiter fails open without Redis", func(t *testing.T) {
		metricsAddr := testenv.FreeAddr(t)
		open, _ := startGateway(t, s, map[string]string{
			"OPS_RATE_LIMIT_PER_MINUTE": "2", "OPS_REDIS_URL": "redis://" + testenv.FreeAddr(t) + "/0",
			"OPS_GATEWAY_METRICS_ADDR": metricsAddr,
		})
		for i := range 5 {
			start := time.Now()
			resp, body := do(t, "GET", open+"/api/site/info", nil, nil)
			require.Equal(t, 200, resp.StatusCode, "request %d: %s", i+1, body)
			require.Less(t, time.Since(start), time.Second)
		}
		resp, _ := do(t, "GET", open+"/readyz", nil, nil)
		require.Equal(t, 200, resp.StatusCode, "the gateway stays ready without Redis")
		_, _, metrics := rawGet(t, "http://"+metricsAddr, "/metrics")
		require.Regexp(t, `obsops_gateway_rate_limit_errors_total [1-9]`, string(metrics))
	})

	t.Run("shutdown closes WebSocket tunnels with 1001", func(t *testing.T) {
		url, p := startGateway(t, s, nil)
		conn, _, err := fws.DefaultDialer.Dial("ws"+strings.TrimPrefix(url, "http")+"/api/transfer/ws/overview", nil)
		require.NoError(t, err)
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, err = conn.ReadMessage()
		require.NoError(t, err)

		p.Signal(terminateSignal) // the close frame waits in the socket if it comes before the read
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err = conn.ReadMessage()
		require.True(t, fws.IsCloseError(err, fws.CloseGoingAway), "got %v", err)
		exited, _ := p.Wait(10 * time.Second)
		require.True(t, exited, "the gateway exits with a tunnel that was open")
		require.Contains(t, p.Output(), "gateway shutting down")
	})

	t.Run("dead upstream: 503 problem with Retry-After quickly", func(t *testing.T) {
		_ = s.Procs["site"].Stop(10 * time.Second)
		exited, _ := s.Procs["site"].Exited()
		require.True(t, exited)
		start := time.Now()
		resp, body := do(t, "GET", gw+"/api/site/info", nil, nil)
		p := requireProblem(t, resp, body, 503)
		require.Less(t, time.Since(start), time.Second)
		require.Equal(t, gateway.UnreachableRetryAfter, resp.Header.Get("Retry-After"), "a client knows when to retry")
		require.Contains(t, p.Detail, "site")
		require.NotEmpty(t, resp.Header.Get("X-Request-ID"), "the gateway's own problem carries the request id too")
		requireNoInternals(t, body, s.URLs["site"])

		// a WebSocket upgrade to a dead upstream is the same problem, nothing hijacked
		_, resp2, err := fws.DefaultDialer.Dial("ws"+strings.TrimPrefix(gw, "http")+"/api/site/ws", nil)
		require.ErrorIs(t, err, fws.ErrBadHandshake)
		require.Equal(t, 503, resp2.StatusCode)

		// the merged document still works and names what is missing, once the one cached while
		// site was up has expired (OPS_OPENAPI_CACHE_TTL): asked until it does, for 15 s at most
		type mergedDoc struct {
			Info        map[string]any            `json:"info"`
			Paths       map[string]any            `json:"paths"`
			Unavailable []string                  `json:"x-obsops-unavailable"`
			Services    map[string]map[string]any `json:"x-obsops-services"`
		}
		var doc mergedDoc
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, body = do(t, "GET", gw+"/openapi.json", nil, nil)
			require.Equal(t, 200, resp.StatusCode)
			doc = mergedDoc{}
			require.NoError(t, json.Unmarshal(body, &doc))
			if len(doc.Unavailable) > 0 || time.Now().After(deadline) {
				break
			}
		}
		require.Equal(t, []string{"site"}, doc.Unavailable)
		require.Contains(t, doc.Info["description"], "site")
		require.NotContains(t, doc.Paths, "/api/site/info")
		require.Contains(t, doc.Paths, "/api/transfer/overview")
		require.Equal(t, "unavailable", doc.Services["site"]["status"], "a service that is down shows as down")
		requireNoInternals(t, body, s.URLs["site"])
	})
	testenv.RequireInvariants(t, s.DatabaseURL)
}

// requireNoInternals checks that an answer to an anonymous caller names no internal address and
// no dial error (the gateway's log and metrics have them).
func requireNoInternals(t *testing.T, body []byte, serviceURL string) {
	t.Helper()
	for _, leak := range []string{strings.TrimPrefix(serviceURL, "http://"), "dial tcp", "connection refused"} {
		require.NotContains(t, string(body), leak)
	}
}

// counter reads one sample of a Prometheus text exposition (0 when absent).
func counter(t *testing.T, metricsURL, series string) float64 {
	t.Helper()
	resp, body := do(t, "GET", metricsURL, nil, nil)
	require.Equal(t, 200, resp.StatusCode)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}
