package authn_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestRemoteServiceBudget: a service other than authtoken (NewRemote) verifies API tokens at
// authtoken with the internal secret. Its own budget counts its client's failures — once each:
// authtoken, trusting the secret, does not count them again — and a valid token is served from
// an address over its budget. Without the secret authtoken counts the service itself as the
// client, which degrades to answers that are still right: junk refused, valid tokens served.
func TestRemoteServiceBudget(t *testing.T) {
	var skip []string
	for _, s := range testenv.SuiteServices() {
		if s != "authtoken" {
			skip = append(skip, s)
		}
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: skip, Env: map[string]string{"OPS_AUTH_FAILURE_LIMIT": "5"}})
	token := s.Admin(t, "create-service-token", "--account", "instrument-3", "--scopes", "read:data", "--name", "remote")
	rdb := s.Redis.Client()
	ctx := context.Background()
	cfg := authn.Config{JWTIssuer: "obsops", JWTAudience: "obsops", JWTLeeway: 30 * time.Second, FailureLimit: 5, FailureWindow: time.Minute}
	rule := authn.UserOrScopes("read:data")
	junk := func() string {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return "Bearer ops_api_token_" + base64.RawURLEncoding.EncodeToString(b)
	}

	a := authn.NewRemote(cfg, s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"], rdb, nil)
	for i := range 20 {
		_, f := a.Authenticate(ctx, junk(), "192.0.2.50", rule)
		require.NotNil(t, f)
		if i < 5 {
			require.Equal(t, 401, f.Problem.Status, "junk %d", i)
		} else {
			require.Equal(t, 429, f.Problem.Status, "junk %d", i)
			require.Greater(t, f.RetryAfter, 0)
		}
	}
	p, f := a.Authenticate(ctx, "Bearer "+token, "192.0.2.50", rule)
	require.Nil(t, f, "a valid token from an address over its budget is served")
	require.Equal(t, "instrument-3", p.Username)
	n, err := rdb.Get(ctx, authn.FailureKeyPrefix+"192.0.2.50").Int()
	require.NoError(t, err)
	require.Equal(t, 20, n, "each failure counted once, by the service")
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"127.0.0.1").Val(), "authtoken did not count the service")

	// Without the secret: authtoken budgets the service's own address (127.0.0.1) and answers
	// 429 beyond it, which the service takes as "did not verify".
	b := authn.NewRemote(cfg, s.URLs["authtoken"], "", rdb, nil)
	for i := range 8 {
		_, f := b.Authenticate(ctx, junk(), "192.0.2.51", rule)
		require.NotNil(t, f)
		require.Contains(t, []int{401, 429}, f.Problem.Status, "junk %d", i)
	}
	n, err = rdb.Get(ctx, authn.FailureKeyPrefix+"127.0.0.1").Int()
	require.NoError(t, err)
	require.Equal(t, 8, n)
	p, f = b.Authenticate(ctx, "Bearer "+token, "192.0.2.51", rule)
	require.Nil(t, f)
	require.Equal(t, "instrument-3", p.Username)
}
