package authn_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

// authtokenOnly starts authtoken alone (with its Redis and database).
func authtokenOnly(t *testing.T) *testenv.Suite {
	var skip []string
	for _, s := range testenv.SuiteServices() {
		if s != "authtoken" {
			skip = append(skip, s)
		}
	}
	return testenv.StartSuite(t, testenv.SuiteOptions{Skip: skip})
}

// verifications is authtoken's count of successful API token verifications.
func verifications(t *testing.T, s *testenv.Suite) int {
	r := testenv.Do(t, http.DefaultClient, testenv.Request(t, http.MethodGet, s.URLs["authtoken"]+"/metrics", "", nil))
	m := regexp.MustCompile(`obsops_token_verifications_total\{result="ok"\} (\d+)`).FindSubmatch(r.Body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestCachedTokens: with OPS_TOKEN_CACHE_TTL a service verifies a busy token at authtoken about
// once per TTL, yet every use is counted exactly (usage_count, last_used_ip); scopes are still
// checked per route; and a revoked token is refused at once (authtoken announces the change),
// and within the TTL by a service that never hears the announcement.
func TestCachedTokens(t *testing.T) {
	s := authtokenOnly(t)
	ctx := context.Background()
	admin := s.JWT(t, "root", authn.RoleAdmin)
	token := s.Admin(t, "create-service-token", "--account", "instrument-7", "--scopes", "read:data", "--name", "cached")
	cfg := authn.Config{JWTIssuer: "obsops", JWTAudience: "obsops", JWTLeeway: 30 * time.Second, TokenCacheTTL: time.Second}
	a := authn.NewRemote(cfg, s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"], s.Redis.Client(), nil)
	// A second service whose Redis is another one: it never hears authtoken's announcements
	// (its uses are counted there, which this test does not read).
	deaf := authn.NewRemote(cfg, s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"], testenv.Redis(t).Client(), nil)
	rule := authn.UserOrScopes("read:data")

	// Requests through a route the middleware protects: a cache hit's use is counted while the
	// handler runs, and the answer waits for it (Principal.UseCounted).
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	api := humafiber.NewV2(app, huma.DefaultConfig("t", "1"))
	var tokenID atomic.Int64
	huma.Register(api, a.Protect(huma.Operation{Method: http.MethodGet, Path: "/who"}, rule), func(ctx context.Context, _ *struct{}) (*whoOutput, error) {
		p := authn.PrincipalFrom(ctx)
		tokenID.Store(p.TokenID)
		out := &whoOutput{}
		out.Body.Username = p.Username
		return out, nil
	})

	before := verifications(t, s)
	const n = 200
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodGet, "/who", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := app.Test(req, -1)
			if assert.NoError(t, err) {
				assert.Equal(t, 200, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	remote := verifications(t, s) - before
	require.Less(t, remote, n/4, "most verifications came from the cache")
	t.Logf("%d verifications, %d of them at authtoken", n, remote)

	// Every use counted, exactly, once the answers are in (those verified at authtoken and those
	// from the cache): read at once, no waiting.
	type usage struct {
		UsageCount int64   `json:"usage_count"`
		LastUsedIP *string `json:"last_used_ip"`
	}
	readUsage := func() usage {
		r := testenv.Do(t, http.DefaultClient, testenv.Request(t, http.MethodGet, s.URLs["authtoken"]+"/api/tokens/"+strconv.FormatInt(tokenID.Load(), 10)+"/usage", admin, nil))
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var u usage
		r.JSON(t, &u)
		return u
	}
	require.EqualValues(t, n, readUsage().UsageCount)

	// Without the middleware: the principal carries its pending use, counted (with the client's
	// address) once UseCounted returns.
	p, f := a.Authenticate(ctx, "Bearer "+token, "192.0.2.9", rule)
	require.Nil(t, f)
	require.NoError(t, p.UseCounted(ctx))
	u := readUsage()
	require.EqualValues(t, n+1, u.UsageCount)
	require.NotNil(t, u.LastUsedIP)
	require.Equal(t, "192.0.2.9", *u.LastUsedIP)

	// Scopes are checked on every request, cached or not; a refusal is no use.
	_, f = a.Authenticate(ctx, "Bearer "+token, "192.0.2.1", authn.UserOrScopes("write:data"))
	require.NotNil(t, f)
	require.Equal(t, 403, f.Problem.Status)
	require.Contains(t, f.Problem.Detail, "write:data")

	// Revoked: refused at once where the announcement arrives, within the TTL where it does not.
	_, f = deaf.Authenticate(ctx, "Bearer "+token, "192.0.2.1", rule)
	require.Nil(t, f)
	_, f = a.Authenticate(ctx, "Bearer "+token, "192.0.2.1", rule)
	require.Nil(t, f, "cached")
	r := testenv.Do(t, http.DefaultClient, testenv.Request(t, http.MethodDelete, s.URLs["authtoken"]+"/api/tokens/"+strconv.FormatInt(tokenID.Load(), 10), admin, nil))
	require.Contains(t, []int{200, 204}, r.Status, "%s", r.Body)
	revoked := time.Now()
	refused := func(a *authn.Authenticator) time.Duration {
		for {
			_, f := a.Authenticate(ctx, "Bearer "+token, "192.0.2.1", rule)
			if f != nil {
				require.Equal(t, 401, f.Problem.Status)
				return time.Since(revoked)
			}
			require.Less(t, time.Since(revoked), authn.MaxTokenCacheTTL+200*time.Millisecond, "a revoked token is still accepted")
			time.Sleep(5 * time.Millisecond)
		}
	}
	announced := refused(a)
	require.Less(t, announced, 500*time.Millisecond, "the announcement empties the cache")
	t.Logf("revoked token refused after %s (announced) and %s (TTL only)", announced, refused(deaf))
}

// slowVerifier passes verifications on to authtoken after a delay (authtoken answering late, as
// on an overloaded machine) and counts them.
type slowVerifier struct {
	next  authn.TokenVerifier
	delay time.Duration
	calls atomic.Int64
}

func (v *slowVerifier) VerifyToken(ctx context.Context, req authn.VerifyRequest) (*authn.Principal, error) {
	v.calls.Add(1)
	time.Sleep(v.delay)
	return v.next.VerifyToken(ctx, req)
}

// TestCachedTokenExpiresUnderLoad: when a busy token's entry has expired (its refresh answered
// late), the requests that find it expired wait for one verification at authtoken instead of
// each sending their own — which, when authtoken was slow because the machine was overloaded,
// made the overload worse.
func TestCachedTokenExpiresUnderLoad(t *testing.T) {
	s := authtokenOnly(t)
	token := s.Admin(t, "create-service-token", "--account", "instrument-8", "--scopes", "read:data", "--name", "busy")
	slow := &slowVerifier{next: authn.NewRemoteTokens(s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"]), delay: 200 * time.Millisecond}
	var mu sync.Mutex
	now := time.Now()
	c := &authn.CachedTokens{Next: slow, Redis: s.Redis.Client(), TTL: time.Second,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	req := authn.VerifyRequest{Token: token, Scopes: []string{"read:data"}, ClientIP: "192.0.2.1"}
	_, err := c.VerifyToken(context.Background(), req)
	require.NoError(t, err)
	require.EqualValues(t, 1, slow.calls.Load())

	mu.Lock()
	now = now.Add(2 * time.Second) // the entry has expired
	mu.Unlock()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.VerifyToken(context.Background(), req)
			if assert.NoError(t, err) {
				assert.Equal(t, "instrument-8", p.Username)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 2, slow.calls.Load(), "50 requests finding the entry expired: one verification at authtoken")
}

// slowPipelines delays every pipeline (the cache's usage MULTI) by delay: a Redis slower than the
// handler.
type slowPipelines struct{ delay time.Duration }

func (slowPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(h.delay)
		return next(ctx, cmds)
	}
}

// TestCachedTokenUseCountedBeforeTheAnswer: a cache hit's use is counted while the handler runs,
// and the answer waits for it — with Redis slower than the handler, each answer's use is in the
// count the moment the answer arrives.
func TestCachedTokenUseCountedBeforeTheAnswer(t *testing.T) {
	s := authtokenOnly(t)
	admin := s.JWT(t, "root", authn.RoleAdmin)
	token := s.Admin(t, "create-service-token", "--account", "instrument-8", "--scopes", "read:data", "--name", "slow")
	cfg := authn.Config{JWTIssuer: "obsops", JWTAudience: "obsops", JWTLeeway: 30 * time.Second, TokenCacheTTL: time.Second}
	rdb := s.Redis.Client()
	rdb.AddHook(slowPipelines{delay: 80 * time.Millisecond})
	a := authn.NewRemote(cfg, s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"], rdb, nil)
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	api := humafiber.NewV2(app, huma.DefaultConfig("t", "1"))
	var tokenID atomic.Int64
	huma.Register(api, a.Protect(huma.Operation{Method: http.MethodGet, Path: "/who"}, authn.UserOrScopes("read:data")), func(ctx context.Context, _ *struct{}) (*whoOutput, error) {
		tokenID.Store(authn.PrincipalFrom(ctx).TokenID)
		return &whoOutput{}, nil
	})
	for i := 1; i <= 4; i++ {
		req := httptest.NewRequest(http.MethodGet, "/who", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := app.Test(req, -1)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		r := testenv.Do(t, http.DefaultClient, testenv.Request(t, http.MethodGet, s.URLs["authtoken"]+"/api/tokens/"+strconv.FormatInt(tokenID.Load(), 10)+"/usage", admin, nil))
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var u struct {
			UsageCount int64 `json:"usage_count"`
		}
		r.JSON(t, &u)
		require.EqualValues(t, i, u.UsageCount, "answer %d: its use is counted when it arrives", i)
	}
}
