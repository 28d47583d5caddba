package authtoken_test

import (
	"bytes"
	"database/sql"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestSecondaryMakesNoChangeAtTheMain runs authtoken as a secondary site's (decisions §45) with no
// main database at all (no OPS_MAIN_DATABASE_URL; the local database stands for the replica): it
// starts and stays ready, session JWTs and API tokens verify from the local database, a login of an
// account linked to its identity only reads (signed here, the account unchanged), and what would
// change a row — creating a token, a first login — answers 409 write_at_main_site saying to make it
// at the main site, at once. (The whole topology with a replica and a real WAN: services/site
// TestSecondarySiteWANCut.)
func TestSecondaryMakesNoChangeAtTheMain(t *testing.T) {
	idp, err := mockoidc.Run()
	require.NoError(t, err)
	t.Cleanup(func() { _ = idp.Shutdown() })
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"authtoken", "transfer", "catalog", "ingest", "site"}})
	// Credentials and an account made at the main site beforehand (the admin commands write to the main).
	jwt := s.JWT(t, "ann", "observer")
	apiToken := s.Admin(t, "create-service-token", "--account", "robot", "--scopes", "read:sources", "--name", "r")
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var carol int64
	require.NoError(t, db.QueryRow(`INSERT INTO users (username, email, oidc_issuer, oidc_subject, last_login_at)
		VALUES ('carol', 'carol@example.org', $1, 'sub-carol', '2026-01-01T00:00:00Z') RETURNING id`, idp.Issuer()).Scan(&carol))

	delete(s.Env, "OPS_MAIN_DATABASE_URL")
	restartAuthtoken(t, s, map[string]string{
		"OPS_SITE_TYPE": "secondary", "OPS_SITE_NAME": "observatory", "OPS_MAIN_SITE_NAME": "datacentre",
		// its own signing key and the main's public keys (docs/two-sites.md): the main's JWT verifies
		"OPS_JWT_SIGNING_KEY_FILE":      testenv.SigningKey(t),
		"OPS_JWT_MAIN_PUBLIC_KEYS_FILE": testenv.PublicKeyFile(t, s.SigningKeyFile),
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

	requireAtMain := func(r response, took time.Duration, what, says string) {
		t.Helper()
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", what, r.Body)
		require.Contains(t, string(r.Body), `"type":"urn:obsops:problem:write_at_main_site"`, what)
		require.Contains(t, problemDetail(t, r), says, what)
		require.Contains(t, problemDetail(t, r), `the main site "datacentre"`, what)
		require.Less(t, took, time.Second, what)
	}
	var before int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM api_tokens`).Scan(&before))
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, s.GatewayURL+"/api/tokens", bytes.NewReader([]byte(`{"name":"new"}`)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+jwt)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		requireAtMain(do(t, c, req), time.Since(start), "create a token", "make it at")
	}
	var after int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM api_tokens`).Scan(&after))
	require.Equal(t, before, after, "no token was made")

	// A first login: no account here, none is created.
	f := &loginFlow{suite: s, idp: idp, browser: c}
	cb := f.authorize(t, f.begin(t), person{sub: "sub-bob", username: "bob", email: "bob@example.org", name: "Bob"})
	start := time.Now()
	requireAtMain(get(t, c, cb.String(), ""), time.Since(start), "first login", "log in at")
	var bobs int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM users WHERE oidc_subject = 'sub-bob'`).Scan(&bobs))
	require.Zero(t, bobs)

	// An account that exists (made at the main, replicated): the login reads it and signs here.
	res, _ := f.login(t, person{sub: "sub-carol", username: "carol", email: "carol-new@example.org", name: "Carol"})
	require.Equal(t, carol, res.User.ID)
	require.Equal(t, "carol", f.me(t, res.AccessToken).User.Username)
	var email string
	var lastLogin time.Time
	require.NoError(t, db.QueryRow(`SELECT email, last_login_at FROM users WHERE id = $1`, carol).Scan(&email, &lastLogin))
	require.Equal(t, "carol@example.org", email, "the profile is refreshed at the main site's logins only")
	require.True(t, lastLogin.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), "last_login_at unchanged: %s", lastLogin)

	r := get(t, c, s.URLs["authtoken"]+"/metrics", "")
	require.False(t, strings.Contains(string(r.Body), "obsops_main_db_reachable"), "no link to the main to report")
}
