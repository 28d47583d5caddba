package authtoken_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestSecondaryWithMainUnreachable runs authtoken as a secondary site's whose main database
// does not answer (OPS_MAIN_DATABASE_URL on a port nobody listens on; the local database stands
// for the replica): it stays ready, session JWTs and API tokens verify from the local database,
// and the writes that need the main — creating a token, recording a login — answer a quick 503
// problem naming the main site. (The whole topology with a replica and a real WAN cut:
// services/site TestSecondarySiteWANCut.)
func TestSecondaryWithMainUnreachable(t *testing.T) {
	idp, err := mockoidc.Run()
	require.NoError(t, err)
	t.Cleanup(func() { _ = idp.Shutdown() })
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"authtoken", "transfer", "catalog", "ingest", "site"}})
	// Credentials made at the main site beforehand (the admin commands write to the main).
	jwt := s.JWT(t, "ann", "observer")
	apiToken := s.Admin(t, "create-service-token", "--account", "robot", "--scopes", "read:sources", "--name", "r")

	restartAuthtoken(t, s, map[string]string{
		"OPS_SITE_TYPE": "secondary",
		// its own signing key and the main's public keys (docs/two-sites.md): the main's JWT verifies
		"OPS_JWT_SIGNING_KEY_FILE":      testenv.SigningKey(t),
		"OPS_JWT_MAIN_PUBLIC_KEYS_FILE": testenv.PublicKeyFile(t, s.SigningKeyFile),
		"OPS_MAIN_DATABASE_URL":         "postgres://postgres@" + testenv.FreeAddr(t) + "/obsops?sslmode=disable",
		"OPS_OIDC_ISSUER":               idp.Issuer(),
		"OPS_OIDC_CLIENT_ID":            idp.ClientID,
		"OPS_OIDC_CLIENT_SECRET":        idp.ClientSecret,
		"OPS_OIDC_REDIRECT_URL":         s.GatewayURL + "/idp/callback",
	})
	c := browser(t)
	for _, cred := range []string{jwt, apiToken} {
		r := get(t, c, s.GatewayURL+"/auth/me", cred)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}

	requireUnreachable := func(r response, took time.Duration, what string) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s: %s", what, r.Body)
		require.Contains(t, problemDetail(t, r), "the main site is unreachable", what)
		require.Equal(t, database.MainRetryAfter, r.Header.Get("Retry-After"), what)
		require.LessOrEqual(t, took, 2*time.Second, what)
	}
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, s.GatewayURL+"/api/tokens", bytes.NewReader([]byte(`{"name":"new"}`)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+jwt)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		requireUnreachable(do(t, c, req), time.Since(start), "create a token")
	}

	f := &loginFlow{suite: s, idp: idp, browser: c}
	cb := f.authorize(t, f.begin(t), person{sub: "sub-bob", username: "bob", email: "bob@example.org", name: "Bob"})
	start := time.Now()
	requireUnreachable(get(t, c, cb.String(), ""), time.Since(start), "login callback")

	r := get(t, c, s.URLs["authtoken"]+"/readyz", "")
	require.Equal(t, http.StatusOK, r.Status, "an unreachable main does not make the service unready: %s", r.Body)
	r = get(t, c, s.URLs["authtoken"]+"/metrics", "")
	require.Contains(t, string(r.Body), "obsops_main_db_reachable 0")
}
