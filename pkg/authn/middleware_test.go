package authn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

// authenticator verifies JWTs of s; its TokenVerifier is nil, so any API-token lookup would panic:
// the cases below prove which requests are refused before any lookup.
func authenticator(s signer, rdb redis.UniversalClient, limit int) *authn.Authenticator {
	return &authn.Authenticator{
		JWT:          verifier(authn.StaticKeys{s.kid(): s.pub}),
		Redis:        rdb,
		FailureLimit: limit, FailureWindow: time.Minute,
	}
}

func TestRulesForJWTs(t *testing.T) {
	s := newSigner(t)
	a := authenticator(s, nil, 0)
	admin := "Bearer " + s.sign(t, validClaims())
	viewer := "Bearer " + s.sign(t, func() map[string]any { c := validClaims(); c["roles"] = []string{"viewer"}; return c }())
	tok, _ := authn.NewAPIToken()
	cases := []struct {
		name, authz string
		rule        authn.Rule
		status      int
		typ         string
	}{
		{"anonymous needs nothing", "", authn.Anonymous(), 0, ""},
		{"missing credential", "", authn.AnyUser(), 401, authn.ProblemUnauthorized},
		{"basic auth is not bearer", "Basic YWxpY2U6eA==", authn.AnyUser(), 401, authn.ProblemUnauthorized},
		{"any user", viewer, authn.AnyUser(), 0, ""},
		{"admin route, admin", admin, authn.Roles(authn.RoleAdmin), 0, ""},
		{"admin route, viewer (BFLA)", viewer, authn.Roles(authn.RoleAdmin), 403, authn.ProblemForbidden},
		{"POST /raw_data_files/ refuses a JWT", admin, authn.RuleFor("POST", "/raw_data_files/"), 403, authn.ProblemForbidden},
		{"POST /raw_data_files/bulk refuses a JWT", admin, authn.RuleFor("POST", "/raw_data_files/bulk"), 403, authn.ProblemForbidden},
		{"PUT /raw_data_files/{id} refuses a JWT", admin, authn.RuleFor("PUT", "/raw_data_files/{id}"), 403, authn.ProblemForbidden},
		{"POST /executed_obs_units/start refuses a JWT", admin, authn.RuleFor("POST", "/executed_obs_units/start"), 403, authn.ProblemForbidden},
		{"PUT /executed_obs_units/{id}/finish refuses a JWT", admin, authn.RuleFor("PUT", "/executed_obs_units/{id}/finish"), 403, authn.ProblemForbidden},
		{"JWT-only route refuses an API token", "Bearer " + tok.Raw, authn.AnyUser(), 403, authn.ProblemForbidden},
		{"malformed API token, no lookup", "Bearer ops_api_token_short", authn.UserOrScopes("read:data"), 401, authn.ProblemUnauthorized},
		{"invalid JWT", "Bearer " + strings.Repeat("a", 20), authn.UserOrScopes("read:data"), 401, authn.ProblemUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, f := a.Authenticate(context.Background(), tc.authz, "192.0.2.1", tc.rule)
			if tc.status == 0 {
				require.Nil(t, f)
				if !tc.rule.Anonymous {
					require.Equal(t, "alice", p.Username)
				}
				return
			}
			require.NotNil(t, f)
			require.Equal(t, tc.status, f.Problem.Status)
			require.Equal(t, tc.typ, f.Problem.Type)
			if tc.status == 401 {
				require.True(t, strings.HasPrefix(f.Challenge, "Bearer"), "401 carries WWW-Authenticate: Bearer")
			}
		})
	}
}

// TestFailedAuthenticationsAreLimitedPerAddress: failures count per address (one Redis key per
// address); beyond the budget they get 429 with Retry-After, but a valid credential from that
// address is still served, and verified credentials never count.
func TestFailedAuthenticationsAreLimitedPerAddress(t *testing.T) {
	s := newSigner(t)
	rdb := testenv.Redis(t).Client()
	a := authenticator(s, rdb, 3)
	ctx := context.Background()
	for i := range 3 {
		_, f := a.Authenticate(ctx, fmt.Sprintf("Bearer not-a-jwt-%d", i), "198.51.100.7", authn.AnyUser())
		require.Equal(t, 401, f.Problem.Status, "attempt %d", i+1)
	}
	for _, bad := range []string{"Bearer not-a-jwt", "Basic YWxpY2U6eA==", "Bearer ops_api_token_short"} {
		_, f := a.Authenticate(ctx, bad, "198.51.100.7", authn.UserOrScopes("read:data"))
		require.Equal(t, 429, f.Problem.Status, bad)
		require.Equal(t, authn.ProblemTooManyAttempts, f.Problem.Type)
		require.Greater(t, f.RetryAfter, 0)
		require.LessOrEqual(t, f.RetryAfter, 60)
	}
	_, f := a.Authenticate(ctx, "", "198.51.100.7", authn.AnyUser())
	require.Equal(t, 401, f.Problem.Status, "no credential at all is not a failed one")

	// A valid credential from that address is served; other addresses are unaffected.
	good := "Bearer " + s.sign(t, validClaims())
	p, f := a.Authenticate(ctx, good, "198.51.100.7", authn.AnyUser())
	require.Nil(t, f)
	require.Equal(t, "alice", p.Username)
	_, f = a.Authenticate(ctx, "Bearer not-a-jwt", "198.51.100.8", authn.AnyUser())
	require.Equal(t, 401, f.Problem.Status)

	// Successful authentications do not count.
	for range 10 {
		_, f := a.Authenticate(ctx, good, "198.51.100.9", authn.AnyUser())
		require.Nil(t, f)
	}
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"198.51.100.9").Val())

	// One key per address; an IPv6 host counts by its /64.
	for i := range 5 {
		_, f := a.Authenticate(ctx, "Bearer x", fmt.Sprintf("2001:db8:1:2::%x", i+1), authn.AnyUser())
		require.NotNil(t, f)
	}
	keys, err := rdb.Keys(ctx, authn.FailureKeyPrefix+"*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{authn.FailureKeyPrefix + "198.51.100.7", authn.FailureKeyPrefix + "198.51.100.8", authn.FailureKeyPrefix + "2001:db8:1:2::/64"}, keys)
}

func TestFailureLimitFailsOpenWithoutRedis(t *testing.T) {
	s := newSigner(t)
	r := testenv.Redis(t)
	a := authenticator(s, r.Client(), 1)
	r.Kill()
	for range 3 {
		_, f := a.Authenticate(context.Background(), "Bearer x", "203.0.113.1", authn.AnyUser())
		require.Equal(t, 401, f.Problem.Status, "no Redis: still 401, never a lock-out or a 500")
	}
}

type whoOutput struct {
	Body struct {
		Username string `json:"username"`
	}
}

func TestProtectedHumaOperation(t *testing.T) {
	s := newSigner(t)
	a := authenticator(s, nil, 0)
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	api := humafiber.NewV2(app, huma.DefaultConfig("t", "1"))
	huma.Register(api, a.Op(huma.Operation{Method: http.MethodGet, Path: "/buffer-stats"}), func(ctx context.Context, _ *struct{}) (*whoOutput, error) {
		out := &whoOutput{}
		require.Nil(t, authn.PrincipalFrom(ctx))
		return out, nil
	})
	huma.Register(api, a.Protect(huma.Operation{Method: http.MethodGet, Path: "/who"}, authn.Roles(authn.RoleAdmin)), func(ctx context.Context, _ *struct{}) (*whoOutput, error) {
		out := &whoOutput{}
		out.Body.Username = authn.PrincipalFrom(ctx).Username
		return out, nil
	})

	do := func(path, authz string) *http.Response {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := app.Test(req)
		require.NoError(t, err)
		return resp
	}
	resp := do("/buffer-stats", "")
	require.Equal(t, 200, resp.StatusCode, "anonymous per the access table")

	resp = do("/who", "")
	require.Equal(t, 401, resp.StatusCode)
	require.Equal(t, `Bearer realm="obsops"`, resp.Header.Get("WWW-Authenticate"))
	require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"))

	resp = do("/who", "Bearer "+s.sign(t, validClaims()))
	require.Equal(t, 200, resp.StatusCode)
	var out whoOutput
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out.Body))
	require.Equal(t, "alice", out.Body.Username, "the handler sees the principal")

	op := api.OpenAPI().Paths["/who"].Get
	require.Equal(t, []map[string][]string{{"bearer": {}}}, op.Security)
	require.Contains(t, op.Responses, "401")
	require.Contains(t, op.Description, "session JWT with role admin")
}
