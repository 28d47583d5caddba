package authtoken_test

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestSecondarySignsWithItsOwnKey runs a main site (authtoken and gateway) and, next to it, a
// secondary site's authtoken and gateway configured as docs/two-sites.md says: its own signing key
// and only the main's PUBLIC keys (OPS_JWT_MAIN_PUBLIC_KEYS_FILE). A JWT the main issued verifies
// at the secondary; a JWT the secondary issued — by a login through the identity provider, or an
// admin JWT by its admin command — names the site in its "site" claim, is signed by a kid the
// main does not publish, and is refused by the main altogether (401 on /auth/me and on an admin
// route), while it verifies at the secondary. (Issue 24, point 8.)
func TestSecondarySignsWithItsOwnKey(t *testing.T) {
	idp, err := mockoidc.Run()
	require.NoError(t, err)
	t.Cleanup(func() { _ = idp.Shutdown() })
	oidc := map[string]string{
		"OPS_OIDC_ISSUER": idp.Issuer(), "OPS_OIDC_CLIENT_ID": idp.ClientID, "OPS_OIDC_CLIENT_SECRET": idp.ClientSecret,
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"transfer", "catalog", "ingest", "site"}, Env: oidc})
	mainAdmin := s.JWT(t, "ann", "admin")

	secAuth, secGW := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := maps.Clone(s.Env) // its database (the local one stands for the replica); none at the main (§45)
	delete(env, "OPS_MAIN_DATABASE_URL")
	maps.Copy(env, map[string]string{
		"OPS_SITE_TYPE": "secondary", "OPS_SITE_NAME": "observatory",
		"OPS_REDIS_URL":                 testenv.Redis(t).URL,
		"OPS_JWT_SIGNING_KEY_FILE":      testenv.SigningKey(t),
		"OPS_JWT_MAIN_PUBLIC_KEYS_FILE": testenv.PublicKeyFile(t, s.SigningKeyFile),
		"OPS_AUTHTOKEN_ADDR":            secAuth, "OPS_AUTHTOKEN_URL": "http://" + secAuth,
		"OPS_GATEWAY_ADDR": secGW, "OPS_GATEWAY_METRICS_ADDR": testenv.FreeAddr(t),
		"OPS_OIDC_REDIRECT_URL": "http://" + secGW + "/idp/callback",
	})
	for _, name := range []string{"authtoken", "gateway"} {
		p := testenv.Start(t, "secondary-"+name, testenv.Binary(t, name), env)
		testenv.WaitReady(t, p, "http://"+env["OPS_"+strings.ToUpper(name)+"_ADDR"]+"/readyz", 30*time.Second)
	}
	sec := &testenv.Suite{GatewayURL: "http://" + secGW}
	c := browser(t)

	// The main publishes its key only; the secondary its own key first, then the main's.
	mainKids, secKids := jwksKids(t, c, s.URLs["authtoken"]), jwksKids(t, c, "http://"+secAuth)
	require.Len(t, mainKids, 1)
	require.Len(t, secKids, 2)
	require.Equal(t, mainKids[0], secKids[1])
	secKid := secKids[0]
	require.NotEqual(t, mainKids[0], secKid)

	// A login at the secondary gets a JWT signed by the secondary's key, naming the site (bob's
	// account exists at the main, made there by a first login — here by SQL —: a secondary creates
	// none, decisions §45).
	bob := person{sub: "sub-bob", username: "bob", email: "bob@example.org", name: "Bob"}
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Exec(`INSERT INTO users (username, oidc_issuer, oidc_subject) VALUES ('bob', $1, 'sub-bob')`, idp.Issuer())
	require.NoError(t, err)
	f := &loginFlow{suite: sec, idp: idp, browser: c}
	res, _ := f.login(t, bob)
	kid, site := jwtKidAndSite(t, res.AccessToken)
	require.Equal(t, secKid, kid)
	require.Equal(t, "observatory", site)
	// So does an admin JWT from the secondary's admin command.
	secAdmin := adminWithEnv(t, env, "issue-jwt", "--user", "root", "--roles", "admin")
	kid, site = jwtKidAndSite(t, secAdmin)
	require.Equal(t, secKid, kid)
	require.Equal(t, "observatory", site)
	// The main's JWTs name the main site.
	kid, site = jwtKidAndSite(t, mainAdmin)
	require.Equal(t, mainKids[0], kid)
	require.Equal(t, "FYST", site)

	for _, tc := range []struct {
		what, base, token, path string
		want                    int
	}{
		{"main JWT at the secondary", sec.GatewayURL, mainAdmin, "/auth/me", http.StatusOK},
		{"main admin JWT on an admin route at the secondary", sec.GatewayURL, mainAdmin, "/api/tokens/audit", http.StatusOK},
		{"secondary login JWT at the secondary", sec.GatewayURL, res.AccessToken, "/auth/me", http.StatusOK},
		{"secondary admin JWT at the secondary", sec.GatewayURL, secAdmin, "/auth/me", http.StatusOK},
		{"main admin JWT at the main", s.GatewayURL, mainAdmin, "/api/tokens/audit", http.StatusOK},
		{"secondary login JWT at the main", s.GatewayURL, res.AccessToken, "/auth/me", http.StatusUnauthorized},
		{"secondary admin JWT at the main", s.GatewayURL, secAdmin, "/auth/me", http.StatusUnauthorized},
		{"secondary admin JWT on an admin route at the main", s.GatewayURL, secAdmin, "/api/tokens/audit", http.StatusUnauthorized},
		{"secondary admin JWT at the main's authtoken directly", s.URLs["authtoken"], secAdmin, "/api/tokens/audit", http.StatusUnauthorized},
	} {
		r := get(t, c, tc.base+tc.path, tc.token)
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.what, r.Body)
	}
}

// TestSecondaryRefusesTheMainsPrivateKey: a secondary authtoken does not start without the main's
// public keys, with a private key among them, or signing with the main's own key — each a one-line
// error naming OPS_JWT_MAIN_PUBLIC_KEYS — and the main does not start with a list of trusted keys.
func TestSecondaryRefusesTheMainsPrivateKey(t *testing.T) {
	mainKey := testenv.SigningKey(t)
	mainPublic := testenv.PublicKeyFile(t, mainKey)
	base := []string{"OPS_DATABASE_URL=postgres://x@127.0.0.1:1/x", "OPS_SITE_TYPE=secondary", "OPS_MAIN_DATABASE_URL=postgres://x@127.0.0.1:1/x"}
	for _, tc := range []struct {
		what string
		env  []string
		want string
	}{
		{"no main public keys", []string{"OPS_JWT_SIGNING_KEY_FILE=" + testenv.SigningKey(t)}, "OPS_JWT_MAIN_PUBLIC_KEYS: required at a secondary site"},
		{"the main's private key as its public keys", []string{"OPS_JWT_SIGNING_KEY_FILE=" + testenv.SigningKey(t), "OPS_JWT_MAIN_PUBLIC_KEYS_FILE=" + mainKey}, "holds a private key"},
		{"signing with the main's key", []string{"OPS_JWT_SIGNING_KEY_FILE=" + mainKey, "OPS_JWT_MAIN_PUBLIC_KEYS_FILE=" + mainPublic}, "holds this site's own signing key"},
		{"main public keys at the main", []string{"OPS_SITE_TYPE=main", "OPS_JWT_SIGNING_KEY_FILE=" + mainKey, "OPS_JWT_MAIN_PUBLIC_KEYS_FILE=" + mainPublic}, "only a secondary site accepts the main site's keys"},
	} {
		cmd := exec.Command(testenv.Binary(t, "authtoken"))
		cmd.Env = append(append([]string{}, base...), tc.env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, tc.what)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Len(t, lines, 1, "%s: one line: %s", tc.what, out)
		require.Contains(t, lines[0], "OPS_JWT_MAIN_PUBLIC_KEYS", tc.what)
		require.Contains(t, lines[0], tc.want, tc.what)
	}
}

// jwksKids are the kids an authtoken publishes, in order.
func jwksKids(t *testing.T, c *http.Client, base string) []string {
	t.Helper()
	r := get(t, c, base+"/.well-known/jwks.json", "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var set authn.JWKSet
	r.JSON(t, &set)
	kids := make([]string, 0, len(set.Keys))
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}

// jwtKidAndSite reads (without verifying) a JWT's kid header and site claim.
func jwtKidAndSite(t *testing.T, raw string) (kid, site string) {
	t.Helper()
	parts := strings.Split(raw, ".")
	require.Len(t, parts, 3, raw)
	var header struct {
		Kid string `json:"kid"`
	}
	var claims struct {
		Site string `json:"site"`
	}
	for i, v := range []any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, v))
	}
	return header.Kid, claims.Site
}

// adminWithEnv runs `authtoken admin ARGS...` with env (a site's environment) and returns its
// stdout.
func adminWithEnv(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "authtoken"), append([]string{"admin"}, args...)...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "authtoken admin %v: %s", args, stderr)
	return strings.TrimSpace(string(out))
}
