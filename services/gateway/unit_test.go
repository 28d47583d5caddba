package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

func mustRegexp(s string) *regexp.Regexp { return regexp.MustCompile(s) }

func frame(opcode byte, masked bool, payload int) []byte {
	f := []byte{0x80 | opcode}
	mask := byte(0)
	if masked {
		mask = 0x80
	}
	switch {
	case payload < 126:
		f = append(f, mask|byte(payload))
	case payload <= 0xffff:
		f = append(f, mask|126, 0, 0)
		binary.BigEndian.PutUint16(f[2:], uint16(payload))
	default:
		f = append(f, mask|127, 0, 0, 0, 0, 0, 0, 0, 0)
		binary.BigEndian.PutUint64(f[2:], uint64(payload))
	}
	if masked {
		f = append(f, 1, 2, 3, 4)
	}
	return append(f, make([]byte, payload)...)
}

func TestFrameTracker(t *testing.T) {
	var stream []byte
	var ends []int // offsets at which a frame ends
	for _, f := range [][]byte{
		frame(0x1, false, 0), frame(0x1, false, 5), frame(0x2, true, 125), frame(0x2, false, 126),
		frame(0x2, true, 70000), frame(0x9, false, 3), frame(0x8, false, 2),
	} {
		stream = append(stream, f...)
		ends = append(ends, len(stream))
	}
	isEnd := map[int]bool{0: true}
	for _, e := range ends {
		isEnd[e] = true
	}
	// feed in chunks of every size from 1 to 20 bytes, and a few big ones
	for _, chunk := range []int{1, 2, 3, 7, 13, 20, 4096, len(stream)} {
		var ft frameTracker
		for off := 0; off < len(stream); {
			n := min(chunk, len(stream)-off)
			ft.feed(stream[off : off+n])
			off += n
			require.Equal(t, isEnd[off], ft.atBoundary(), "chunk %d offset %d", chunk, off)
		}
		require.True(t, ft.sawClose)
	}
	var ft frameTracker
	ft.feed(frame(0x1, false, 10)[:5])
	require.False(t, ft.atBoundary())
	require.False(t, ft.sawClose)
}

func TestCloseFrame(t *testing.T) {
	f := closeFrame(1001, "gateway shutting down")
	require.Equal(t, byte(0x88), f[0])
	require.Equal(t, int(f[1]), len(f)-2)
	require.Equal(t, uint16(1001), binary.BigEndian.Uint16(f[2:4]))
	require.Equal(t, "gateway shutting down", string(f[4:]))
	require.LessOrEqual(t, len(closeFrame(1001, strings.Repeat("x", 500))), 127)
}

// TestRetryAfterIsTight checks the formula against the estimator itself: after the returned
// wait the estimate admits one more request, a little earlier it does not.
func TestRetryAfterIsTight(t *testing.T) {
	est := func(cur, prev int64, at, w time.Duration) float64 {
		if at >= w { // next window: cur becomes prev
			return float64(cur) * float64(2*w-at) / float64(w)
		}
		return float64(prev)*float64(w-at)/float64(w) + float64(cur)
	}
	r := rand.New(rand.NewPCG(1, 2))
	w := time.Minute
	for range 10000 {
		limit := r.Int64N(2000) + 1
		prev := r.Int64N(2 * limit)
		cur := r.Int64N(limit + 1)
		elapsed := time.Duration(r.Int64N(int64(w)))
		if est(cur, prev, elapsed, w)+1 <= float64(limit) {
			continue // would be admitted now
		}
		d := retryAfter(cur, prev, limit, elapsed, w)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 2*w)
		require.LessOrEqual(t, est(cur, prev, elapsed+d+time.Millisecond, w)+1, float64(limit)+1e-6,
			"limit %d cur %d prev %d elapsed %s wait %s", limit, cur, prev, elapsed, d)
		if d > 10*time.Millisecond {
			require.Greater(t, est(cur, prev, elapsed+d-10*time.Millisecond, w)+1, float64(limit),
				"wait %s is longer than needed (limit %d cur %d prev %d elapsed %s)", d, limit, cur, prev, elapsed)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	require.Equal(t, "1", retryAfterSeconds(0))
	require.Equal(t, "1", retryAfterSeconds(time.Millisecond))
	require.Equal(t, "2", retryAfterSeconds(1001*time.Millisecond))
	require.Equal(t, "60", retryAfterSeconds(time.Minute))
}

func TestRateLimiterWithRealRedis(t *testing.T) {
	rs := testenv.Redis(t)
	m := NewMetrics(prometheus.NewRegistry())
	l := NewRateLimiter(rs.Client(), 3, 100*time.Millisecond, slog.New(slog.DiscardHandler), m, nil)
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	l.now = func() time.Time { return now }
	ctx := context.Background()

	for i := range 3 {
		d, err := l.Allow(ctx, "cred:abc")
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i+1)
		require.Equal(t, int64(2-i), d.Remaining)
	}
	d, err := l.Allow(ctx, "cred:abc")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	// 3 in this window, none before: free again when the window has moved far enough that
	// 3*(unelapsed fraction) + 0 <= 2, i.e. 50 s (rest of the window) + 20 s.
	require.InDelta(t, (70 * time.Second).Seconds(), d.RetryAfter.Seconds(), 0.01)

	d, err = l.Allow(ctx, "cred:other")
	require.NoError(t, err)
	require.True(t, d.Allowed, "keys are independent")

	// at 79 s (1 s before the wait is over) still refused; just after it admitted
	now = time.Date(2026, 1, 1, 0, 1, 19, 0, time.UTC)
	d, err = l.Allow(ctx, "cred:abc")
	require.NoError(t, err)
	require.False(t, d.Allowed, "still over 1 s before Retry-After")
	now = time.Date(2026, 1, 1, 0, 1, 20, int(time.Millisecond), time.UTC)
	d, err = l.Allow(ctx, "cred:abc")
	require.NoError(t, err)
	require.True(t, d.Allowed, "admitted once Retry-After has passed")

	// counters expire on their own
	ttl, err := rs.Client().PTTL(ctx, "ops:ratelimit:{cred:abc}:"+strconv.FormatInt(now.UnixMilli()/60000, 10)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Minute)
	require.LessOrEqual(t, ttl, 2*time.Minute)

	// Redis gone: the decision errors and the middleware lets requests through
	rs.Kill()
	_, err = l.Allow(ctx, "cred:abc")
	require.Error(t, err)
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	app.Use(l.Handler)
	app.Get("/x", func(c *fiber.Ctx) error { return c.SendString("ok") })
	for range 5 {
		resp, err := app.Test(httptest.NewRequest("GET", "/x", nil))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
	}
}

// TestKeyNeverHoldsTheSecret: a verified credential is keyed by its fingerprint, never the
// secret; an unverified one, like an anonymous request, by the client address (IPv6 by /64).
func TestKeyNeverHoldsTheSecret(t *testing.T) {
	app := fiber.New()
	known := NewKnownCredentials(100)
	verified := Fingerprint(sha256.Sum256([]byte("Bearer ops_api_token_SECRET")))
	known.Add(verified, budgetOf(verified, ""))
	tokenOfUser := Fingerprint(sha256.Sum256([]byte("Bearer ops_api_token_OTHER")))
	known.Add(tokenOfUser, budgetOf(tokenOfUser, "42"))
	var keys []string
	app.Get("/", func(c *fiber.Ctx) error {
		_, budget := known.credential(c)
		keys = append(keys, Key(c, budget))
		return nil
	})
	for _, auth := range []string{"Bearer ops_api_token_SECRET", "Bearer ops_api_token_SECRET2", "", "Bearer ops_api_token_OTHER"} {
		req := httptest.NewRequest("GET", "/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		_, err := app.Test(req)
		require.NoError(t, err)
	}
	require.Equal(t, "cred:"+hex.EncodeToString(verified[:]), keys[0])
	require.Equal(t, "ip:0.0.0.0", keys[1], "an unverified credential shares its address's budget")
	require.Equal(t, "ip:0.0.0.0", keys[2])
	require.Equal(t, "acct:42", keys[3], "a credential of a named account counts against the account's budget")
	for _, k := range keys {
		require.NotContains(t, k, "SECRET")
	}
}

// TestKnownCredentialsAreBounded: the memory of verified credentials never exceeds twice its
// capacity, keeps what is in use, and forgets on request.
func TestKnownCredentialsAreBounded(t *testing.T) {
	k := NewKnownCredentials(160) // 10 per shard and generation
	hot := Fingerprint(sha256.Sum256([]byte("hot")))
	k.Add(hot, "acct:1")
	for i := range 100000 {
		k.Add(Fingerprint(sha256.Sum256([]byte(strconv.Itoa(i)))), "acct:2")
		if i%5 == 0 {
			_, known := k.Budget(hot)
			require.True(t, known, "a credential in use stays known")
		}
	}
	n := 0
	for i := range k.shards {
		n += len(k.shards[i].cur) + len(k.shards[i].prev)
	}
	require.LessOrEqual(t, n, 2*160)
	k.Forget(hot)
	_, known := k.Budget(hot)
	require.False(t, known)
}

func TestGuard(t *testing.T) {
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	app.Use(Guard)
	app.All("/*", func(c *fiber.Ctx) error { return c.SendString("routed") })
	for path, want := range map[string]int{
		"/api/site/info": 200, "/sources/12/details": 200, "/api/site/v1.2/x": 200, "/sources/M.31": 200,
		"/api/site/info?x=../..": 200, "/internalx": 200, "/api/internal/x": 200,
		"/internal": 404, "/internal/": 404, "/internal/x": 404, "/INTERNAL/x": 404,
		"/api/site/../metrics": 404, "/api/site/./info": 404, "/api/site/%2e%2e/metrics": 404,
		"/api/site/%2E%2e/x": 404, "/%69nternal/x": 404, "/api/site/..%2Fmetrics": 404,
		"/api/site/x/..": 404, "/api/site/a\\..\\b": 404, "/api/site/%zz": 404,
	} {
		resp, err := app.Test(rawRequest(path))
		require.NoError(t, err, path)
		require.Equal(t, want, resp.StatusCode, path)
		if want == 404 {
			require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"), path)
		}
	}
}

// rawRequest builds a request whose path reaches the server exactly as written.
func rawRequest(path string) *http.Request {
	req := httptest.NewRequest("GET", "/", nil)
	req.RequestURI = path // what Fiber's app.Test writes on the wire
	return req
}

func TestCORSDisabledWhenEmpty(t *testing.T) {
	require.Nil(t, NewCORS(nil))
}

func TestCORSAny(t *testing.T) {
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	app.Use(NewCORS([]string{"*"}).Handler)
	app.Get("/x", func(c *fiber.Ctx) error { return c.SendString("ok") })
	req := httptest.NewRequest("OPTIONS", "/x", nil)
	req.Header.Set("Origin", "https://anything.example")
	req.Header.Set("Access-Control-Request-Method", "DELETE")
	resp, err := app.Test(req)
	require.NoError(t, err)
	require.Equal(t, 204, resp.StatusCode)
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "DELETE")

	req = httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("Origin", "https://anything.example")
	resp, err = app.Test(req)
	require.NoError(t, err)
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "ok", string(b))
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		wantVar string
	}{
		{map[string]string{}, ""},
		{map[string]string{"OPS_CORS_ORIGINS": "https://ops.example.org, http://localhost:5173"}, ""},
		{map[string]string{"OPS_CORS_ORIGINS": "*"}, ""},
		{map[string]string{"OPS_CORS_ORIGINS": "ops.example.org"}, "OPS_CORS_ORIGINS"},
		{map[string]string{"OPS_CORS_ORIGINS": "https://ops.example.org/app"}, "OPS_CORS_ORIGINS"},
		{map[string]string{"OPS_CORS_ORIGINS": "*,https://a.example"}, "OPS_CORS_ORIGINS"},
		{map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "-1"}, "OPS_RATE_LIMIT_PER_MINUTE"},
		{map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "lots"}, "OPS_RATE_LIMIT_PER_MINUTE"},
		{map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0"}, ""},
		{map[string]string{"OPS_RATE_LIMIT_REDIS_TIMEOUT": "0s"}, "OPS_RATE_LIMIT_REDIS_TIMEOUT"},
		{map[string]string{"OPS_OPENAPI_CACHE_TTL": "soon"}, "OPS_OPENAPI_CACHE_TTL"},
		{map[string]string{"OPS_UPSTREAM_TIMEOUT": "0s"}, "OPS_UPSTREAM_TIMEOUT"},
		{map[string]string{"OPS_UPSTREAM_DIAL_TIMEOUT": "-1s"}, "OPS_UPSTREAM_DIAL_TIMEOUT"},
		{map[string]string{"OPS_GATEWAY_ADDR": "8080"}, "OPS_GATEWAY_ADDR"},
		{map[string]string{"OPS_UPSTREAM_PIPELINE_DEPTH": "1", "OPS_UPSTREAM_PIPELINE_WINDOW": "0s"}, ""},
		{map[string]string{"OPS_UPSTREAM_PIPELINE_DEPTH": "0"}, "OPS_UPSTREAM_PIPELINE_DEPTH"},
		{map[string]string{"OPS_UPSTREAM_PIPELINE_DEPTH": "65"}, "OPS_UPSTREAM_PIPELINE_DEPTH"},
		{map[string]string{"OPS_UPSTREAM_PIPELINE_WINDOW": "-1ms"}, "OPS_UPSTREAM_PIPELINE_WINDOW"},
		{map[string]string{"OPS_UPSTREAM_PIPELINE_WINDOW": "2s"}, "OPS_UPSTREAM_PIPELINE_WINDOW"},
		{map[string]string{"OPS_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1"}, ""},
		{map[string]string{"OPS_TRUSTED_PROXIES": "10.0.0.0/33"}, "OPS_TRUSTED_PROXIES"},
		{map[string]string{"OPS_PROXY_HEADER": "X-Real-IP"}, "OPS_PROXY_HEADER"},
		{map[string]string{"OPS_PROXY_HEADER": "X Real", "OPS_TRUSTED_PROXIES": "10.0.0.1"}, "OPS_PROXY_HEADER"},
		{map[string]string{"OPS_PROXY_HEADER": "X-Real-IP", "OPS_TRUSTED_PROXIES": "10.0.0.1"}, ""},
	} {
		t.Run(strings.Join(mapPairs(tc.env), ","), func(t *testing.T) {
			for _, k := range allGatewayVars {
				t.Setenv(k, "") // restored after the test
				require.NoError(t, os.Unsetenv(k))
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var cfg Config
			err := config.Load(&cfg)
			if tc.wantVar == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.wantVar+": "), "error %q names %s", err, tc.wantVar)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

var allGatewayVars = []string{"OPS_CORS_ORIGINS", "OPS_RATE_LIMIT_PER_MINUTE", "OPS_RATE_LIMIT_REDIS_TIMEOUT",
	"OPS_OPENAPI_CACHE_TTL", "OPS_UPSTREAM_TIMEOUT", "OPS_UPSTREAM_DIAL_TIMEOUT", "OPS_GATEWAY_ADDR",
	"OPS_TRUSTED_PROXIES", "OPS_PROXY_HEADER", "OPS_UPSTREAM_PIPELINE_DEPTH", "OPS_UPSTREAM_PIPELINE_WINDOW"}

func mapPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	if len(out) == 0 {
		return []string{"defaults"}
	}
	return out
}

// TestRateLimiterLeases: two replicas share one Redis; leases keep Redis off the hot path yet the
// limit is never exceeded, and at most one lease per replica goes unspent.
func TestRateLimiterLeases(t *testing.T) {
	rs := testenv.Redis(t)
	rdb := rs.Client()
	mk := func() *RateLimiter {
		l := NewRateLimiter(rdb, 1000, 100*time.Millisecond, slog.New(slog.DiscardHandler), NewMetrics(prometheus.NewRegistry()), nil)
		l.now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC) }
		return l
	}
	a, b := mk(), mk()
	require.Equal(t, int64(10), a.batch)
	ctx := context.Background()
	counter := func() int64 {
		n, err := rdb.Get(ctx, "ops:ratelimit:{cred:k}:"+strconv.FormatInt(a.now().UnixMilli()/60000, 10)).Int64()
		require.NoError(t, err)
		return n
	}
	d, err := a.Allow(ctx, "cred:k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(10), counter(), "one lease of 10 counted up front")
	for range 9 {
		d, err := a.Allow(ctx, "cred:k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.Equal(t, int64(10), counter(), "spent locally, Redis not asked")

	admitted := 10
	for i := 0; ; i++ {
		l := a
		if i%3 == 0 {
			l = b
		}
		d, err := l.Allow(ctx, "cred:k")
		require.NoError(t, err)
		if !d.Allowed {
			require.Greater(t, d.RetryAfter, time.Duration(0))
			break
		}
		admitted++
		require.Less(t, i, 2000)
	}
	require.LessOrEqual(t, counter(), int64(1000))
	require.LessOrEqual(t, admitted, 1000)
	require.GreaterOrEqual(t, admitted, 1000-2*10)
}

// TestProxyClient: the gateway takes the client address from OPS_PROXY_HEADER only on a
// connection from OPS_TRUSTED_PROXIES; otherwise the connection is the client.
func TestProxyClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []string
		header  string
		value   string
		want    string
		trusted bool
	}{
		{"no proxies: the header is ignored", nil, "X-Real-IP", "203.0.113.5", "0.0.0.0", false},
		{"from a trusted range: the header names the client", []string{"0.0.0.0/8"}, "X-Real-IP", "203.0.113.5", "203.0.113.5", true},
		{"trusted single address", []string{"10.1.1.1", "0.0.0.0"}, "X-Real-IP", "2001:db8::7", "2001:db8::7", true},
		{"trusted, no usable header: the proxy itself", []string{"0.0.0.0/8"}, "X-Real-IP", "garbage", "0.0.0.0", true},
		{"not from a trusted proxy", []string{"10.0.0.0/8"}, "X-Real-IP", "203.0.113.5", "0.0.0.0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ProxyClient(tc.proxies, tc.header)
			app := fiber.New()
			var got string
			var trusted bool
			app.Get("/", func(c *fiber.Ctx) error { got, trusted = f(c); return nil })
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-Real-IP", tc.value)
			_, err := app.Test(req)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.trusted, trusted)
		})
	}
}
