package authtoken_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestFailedAuthenticationsAreRateLimited: through the gateway, one client address that keeps
// presenting bad credentials gets 429 with Retry-After, even with a good credential, until the
// window passes; the limit is counted in the service (shared Redis), per client address.
func TestFailedAuthenticationsAreRateLimited(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_AUTH_FAILURE_LIMIT": "3"}})
	good := s.JWT(t, "carol")
	c := noRedirects()
	for i := range 3 {
		r := get(t, c, s.GatewayURL+"/auth/me", "not-a-jwt")
		require.Equal(t, 401, r.Status, "attempt %d", i+1)
		require.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
	}
	r := get(t, c, s.GatewayURL+"/auth/me", good)
	require.Equal(t, 429, r.Status, "blocked for this address, whatever the credential: %s", r.Body)
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Greater(t, retry, 0)
	problemDetail(t, r)

	// Directly at the service, the same address is blocked too: the service enforces it itself.
	r = get(t, c, s.URLs["authtoken"]+"/auth/me", good)
	require.Equal(t, 429, r.Status)
}
