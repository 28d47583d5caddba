package authtoken_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"database/sql"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/authtoken"
)

// revocationBound is how soon a disable or a role taken away must take effect everywhere.
const revocationBound = 5 * time.Second

// authtokenBehindGateway is the suite with authtoken and the gateway only.
func authtokenBehindGateway() testenv.SuiteOptions {
	return testenv.SuiteOptions{Skip: []string{"transfer", "catalog", "ingest", "site"}}
}

// send sends method url with a bearer credential and an optional JSON body.
func send(t *testing.T, method, url, bearer, body string) response {
	t.Helper()
	var req *http.Request
	var err error
	if body != "" {
		req, err = http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, err = http.NewRequest(method, url, nil)
		require.NoError(t, err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return do(t, &http.Client{Timeout: 10 * time.Second}, req)
}

// userView is a user as the user routes answer it.
type userView struct {
	ID                 int64      `json:"id"`
	Username           string     `json:"username"`
	IsActive           bool       `json:"is_active"`
	Roles              []string   `json:"roles"`
	SessionsValidAfter *time.Time `json:"sessions_valid_after"`
}

// userByName finds a user through GET /api/users as admin.
func userByName(t *testing.T, s *testenv.Suite, admin, name string) userView {
	t.Helper()
	r := send(t, "GET", s.URLs["authtoken"]+"/api/users?q="+name, admin, "")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var page struct{ Items []userView }
	r.JSON(t, &page)
	for _, u := range page.Items {
		if u.Username == name {
			return u
		}
	}
	t.Fatalf("no user %q in %s", name, r.Body)
	return userView{}
}

// remoteAuthenticator is what every other service builds (authn.NewRemote): JWTs verified
// locally with the JWKS and the user directory, API tokens at authtoken.
func remoteAuthenticator(s *testenv.Suite) *authn.Authenticator {
	return authn.NewRemote(authn.Config{JWTIssuer: "obsops", JWTAudience: "obsops", JWTLeeway: 30 * time.Second},
		s.URLs["authtoken"], s.Env["OPS_INTERNAL_SECRET"], s.Redis.Client(), nil)
}

// remoteStatus is the status another service would answer cred with under rule (200 if allowed).
func remoteStatus(a *authn.Authenticator, cred string, rule authn.Rule) int {
	_, f := a.Authenticate(context.Background(), "Bearer "+cred, "", rule)
	if f != nil {
		return f.Problem.Status
	}
	return 200
}

// adminRoute is an admin-only route of authtoken, from the access table.
type adminRoute struct{ method, path string }

// adminRoutes lists every admin route of authtoken (the access table entries under its
// prefixes), with {id} replaced by id.
func adminRoutes(id int64) []adminRoute {
	var out []adminRoute
	for key, rule := range authn.Access() {
		method, path, _ := strings.Cut(key, " ")
		if !strings.HasPrefix(path, "/api/tokens") && !strings.HasPrefix(path, "/api/users") {
			continue
		}
		if rule.JWT && slices.Equal(rule.JWTRoles, []string{authn.RoleAdmin}) {
			out = append(out, adminRoute{method, strings.ReplaceAll(path, "{id}", strconv.FormatInt(id, 10))})
		}
	}
	slices.SortFunc(out, func(a, b adminRoute) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	return out
}

// call sends route with cred; writes get an empty object (refused before the body matters, or
// a 422 when allowed: neither changes anything).
func (r adminRoute) call(t *testing.T, base, cred string) int {
	body := ""
	if r.method != "GET" {
		body = "{}"
	}
	return send(t, r.method, base+r.path, cred, body).Status
}

// waitStatus polls until check returns want or the revocation bound since start has passed.
func waitStatus(t *testing.T, start time.Time, what string, want int, check func() int) time.Duration {
	t.Helper()
	for {
		got := check()
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > revocationBound {
			t.Fatalf("%s: still %d %s after the change, want %d", what, got, time.Since(start), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A disabled admin's JWT and API token are refused within 5 s on every admin route of
// authtoken, directly and through the gateway, and by every other service's authenticator.
func TestDisabledAdminRefusedEverywhere(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	eve := s.JWT(t, "eve", authn.RoleAdmin)
	eveUser := userByName(t, s, root, "eve")
	r := send(t, "POST", s.GatewayURL+"/api/tokens/", eve, `{"name":"eve's script","scopes":["read:data"]}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var tok struct{ Token string }
	r.JSON(t, &tok)
	remote := remoteAuthenticator(s)
	bases := map[string]string{"authtoken": s.URLs["authtoken"], "gateway": s.GatewayURL}
	routes := adminRoutes(eveUser.ID)
	require.GreaterOrEqual(t, len(routes), 5, "admin routes: %v", routes)

	for name, base := range bases {
		for _, rt := range routes {
			status := rt.call(t, base, eve)
			require.NotContains(t, []int{401, 403}, status, "before: %s %s via %s", rt.method, rt.path, name)
		}
		require.Equal(t, 200, send(t, "GET", base+"/auth/me", tok.Token, "").Status, "token before, via %s", name)
	}
	require.Equal(t, 200, remoteStatus(remote, eve, authn.Roles(authn.RoleAdmin)))
	require.Equal(t, 200, remoteStatus(remote, tok.Token, authn.UserOrScopes("read:data")))

	start := time.Now()
	r = send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", eveUser.ID), root, `{"is_active":false}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var disabled userView
	r.JSON(t, &disabled)
	require.False(t, disabled.IsActive)
	require.NotNil(t, disabled.SessionsValidAfter)

	var slowest time.Duration
	for name, base := range bases {
		for _, rt := range routes {
			took := waitStatus(t, start, fmt.Sprintf("%s %s via %s", rt.method, rt.path, name), 401, func() int { return rt.call(t, base, eve) })
			slowest = max(slowest, took)
		}
		took := waitStatus(t, start, "API token via "+name, 401, func() int { return send(t, "GET", base+"/auth/me", tok.Token, "").Status })
		slowest = max(slowest, took)
	}
	slowest = max(slowest, waitStatus(t, start, "another service, JWT", 401, func() int { return remoteStatus(remote, eve, authn.Roles(authn.RoleAdmin)) }))
	slowest = max(slowest, waitStatus(t, start, "another service, API token", 401, func() int { return remoteStatus(remote, tok.Token, authn.UserOrScopes("read:data")) }))
	t.Logf("every check refused the disabled admin within %s of the change", slowest)

	// The change is audited: who, when, what.
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()
	var actor, action string
	var at time.Time
	require.NoError(t, db.QueryRow(`SELECT actor, action, at FROM user_audit WHERE user_id = $1 ORDER BY id DESC LIMIT 1`, eveUser.ID).Scan(&actor, &action, &at))
	require.Equal(t, "root", actor)
	require.Equal(t, "disable", action)
	require.WithinDuration(t, time.Now(), at, time.Minute)

	// Enabled again: the API token verifies again, the session JWT issued before stays refused.
	r = send(t, "PUT", s.URLs["authtoken"]+fmt.Sprintf("/api/users/%d", eveUser.ID), root, `{"is_active":true}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	waitStatus(t, time.Now(), "API token after enabling", 200, func() int { return remoteStatus(remote, tok.Token, authn.UserOrScopes("read:data")) })
	require.Equal(t, 401, send(t, "GET", s.GatewayURL+"/auth/me", eve, "").Status, "old session after enabling")
	require.Equal(t, 401, remoteStatus(remote, eve, authn.AnyUser()), "old session after enabling, another service")
	// A new login works once the second of the revocation has passed (iat has whole seconds).
	for time.Now().Unix() < disabled.SessionsValidAfter.Unix()+1 {
		time.Sleep(100 * time.Millisecond)
	}
	fresh := s.JWT(t, "eve")
	require.Equal(t, 200, send(t, "GET", s.GatewayURL+"/auth/me", fresh, "").Status)
}

// A role taken away stops counting within 5 s everywhere; the JWT still works for what the
// user may still do.
func TestRevokedRoleRefused(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	bob := s.JWT(t, "bob", authn.RoleAdmin, authn.RoleViewer)
	bobUser := userByName(t, s, root, "bob")
	remote := remoteAuthenticator(s)
	routes := adminRoutes(bobUser.ID)
	require.Equal(t, 200, send(t, "GET", s.GatewayURL+"/api/users", bob, "").Status)
	require.Equal(t, 200, remoteStatus(remote, bob, authn.Roles(authn.RoleAdmin)))

	start := time.Now()
	r := send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", bobUser.ID), root, `{"roles":["viewer"]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var after userView
	r.JSON(t, &after)
	require.Equal(t, []string{"viewer"}, after.Roles)
	for name, base := range map[string]string{"authtoken": s.URLs["authtoken"], "gateway": s.GatewayURL} {
		for _, rt := range routes {
			waitStatus(t, start, fmt.Sprintf("%s %s via %s", rt.method, rt.path, name), 403, func() int { return rt.call(t, base, bob) })
		}
		require.Equal(t, 200, send(t, "GET", base+"/auth/me", bob, "").Status, "bob may still use his session")
	}
	waitStatus(t, start, "another service", 403, func() int { return remoteStatus(remote, bob, authn.Roles(authn.RoleAdmin)) })
	require.Equal(t, 200, remoteStatus(remote, bob, authn.Roles(authn.RoleViewer)))

	// Granted back (the JWT still claims admin): it counts again.
	r = send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", bobUser.ID), root, `{"roles":["admin","viewer"]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	waitStatus(t, time.Now(), "granted back", 200, func() int { return remoteStatus(remote, bob, authn.Roles(authn.RoleAdmin)) })

	// A service account losing role service: its API token stops passing service-only routes.
	r = send(t, "POST", s.GatewayURL+"/api/tokens/service", root, `{"account":"pol2-ingest","scopes":["write:data"]}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var svcTok struct {
		Token   string
		Account struct {
			UserID int64 `json:"user_id"`
		}
	}
	r.JSON(t, &svcTok)
	serviceOnly := authn.ServiceAccount("write:data")
	require.Equal(t, 200, remoteStatus(remote, svcTok.Token, serviceOnly))
	start = time.Now()
	r = send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", svcTok.Account.UserID), root, `{"roles":[]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	took := waitStatus(t, start, "service token without role service", 403, func() int { return remoteStatus(remote, svcTok.Token, serviceOnly) })
	t.Logf("API token lost its role %s after the change", took)

	var audit int
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM user_audit WHERE user_id = $1 AND action = 'set_roles' AND actor = 'root'
		AND detail->'before' = '["admin","viewer"]' AND detail->'after' = '["viewer"]'`, bobUser.ID).Scan(&audit))
	require.Equal(t, 1, audit)
}

// The last active admin cannot be disabled or lose admin, by the API or the command line.
func TestLastActiveAdmin(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	s.JWT(t, "eve", authn.RoleAdmin)
	rootUser, eveUser := userByName(t, s, root, "root"), userByName(t, s, root, "eve")
	url := func(u userView) string { return s.GatewayURL + fmt.Sprintf("/api/users/%d", u.ID) }

	require.Equal(t, 200, send(t, "PUT", url(eveUser), root, `{"is_active":false}`).Status)
	for _, body := range []string{`{"is_active":false}`, `{"roles":["viewer"]}`, `{"roles":[]}`} {
		r := send(t, "PUT", url(rootUser), root, body)
		require.Equal(t, 409, r.Status, "%s: %s", body, r.Body)
		require.Contains(t, problemDetail(t, r), "last active admin")
	}
	cmd := exec.Command(testenv.Binary(t, "authtoken"), "admin", "disable-user", "--user", "root")
	cmd.Env = os.Environ()
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "last active admin")
	require.Equal(t, []string{"admin"}, userByName(t, s, root, "root").Roles)

	// Command-line changes are audited too; GET /api/users/audit shows them.
	audit := func() []string {
		r := send(t, "GET", s.GatewayURL+fmt.Sprintf("/api/users/audit?user_id=%d", eveUser.ID), root, "")
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var page struct {
			Items []struct {
				Actor  string         `json:"actor"`
				Action string         `json:"action"`
				UserID int64          `json:"user_id"`
				Detail map[string]any `json:"detail"`
				At     time.Time      `json:"at"`
			}
			Total int
		}
		r.JSON(t, &page)
		var out []string
		for _, e := range page.Items {
			require.Equal(t, eveUser.ID, e.UserID)
			require.WithinDuration(t, time.Now(), e.At, time.Minute)
			out = append(out, fmt.Sprintf("%s by %s %v", e.Action, e.Actor, e.Detail))
		}
		require.Len(t, out, page.Total)
		return out
	}
	require.Equal(t, []string{"disable by root map[username:eve]", "grant_roles by admin-cli map[added:[admin]]"}, audit())

	// With eve enabled again (by the command line), root may step down.
	require.Contains(t, s.Admin(t, "enable-user", "--user", "eve"), "enabled")
	require.Equal(t, "enable by admin-cli map[username:eve]", audit()[0])
	require.Equal(t, 200, send(t, "PUT", url(rootUser), root, `{"roles":["viewer"]}`).Status)
}

// GET /api/users: pagination (docs/api.md, "Conventions"), filters; GET/PUT one user; errors.
func TestUserRoutes(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	viewer := s.JWT(t, "vera", authn.RoleViewer)
	s.Admin(t, "create-user", "--user", "scuba2-ingest", "--roles", "service", "--service")
	s.Admin(t, "create-user", "--user", "obs_1", "--roles", "observer")
	s.Admin(t, "create-user", "--user", "obsX1")
	require.Contains(t, s.Admin(t, "disable-user", "--user", "obsX1"), "disabled")
	base := s.GatewayURL + "/api/users"

	type page struct {
		Items  []userView
		Total  int64
		Limit  int
		Offset int
	}
	list := func(query string) page {
		r := send(t, "GET", base+query, root, "")
		require.Equal(t, 200, r.Status, "%s: %s", query, r.Body)
		var p page
		r.JSON(t, &p)
		return p
	}
	names := func(p page) []string {
		var out []string
		for _, u := range p.Items {
			out = append(out, u.Username)
		}
		return out
	}
	all := list("")
	require.Equal(t, int64(5), all.Total)
	require.Equal(t, 50, all.Limit)
	require.Equal(t, []string{"root", "vera", "scuba2-ingest", "obs_1", "obsX1"}, names(all))
	require.Equal(t, []string{"vera", "scuba2-ingest"}, names(list("?limit=2&offset=1")))
	require.Equal(t, int64(5), list("?limit=2&offset=1").Total)
	require.Empty(t, list("?offset=10").Items)
	require.Equal(t, []string{"obs_1"}, names(list("?q=OBS_")), "q is case-insensitive, _ is literal")
	require.Equal(t, []string{"scuba2-ingest"}, names(list("?role=service")))
	require.Equal(t, []string{"obsX1"}, names(list("?is_active=false")))
	require.Equal(t, []string{"root", "vera", "scuba2-ingest", "obs_1"}, names(list("?is_active=true")))
	require.Equal(t, []string{"root"}, names(list("?role=admin&is_active=true")))

	for query, field := range map[string]string{
		"?limit=0": "query.limit", "?limit=501": "query.limit", "?offset=-1": "query.offset",
		"?role=boss": "query.role", "?is_active=maybe": "query.is_active",
	} {
		r := send(t, "GET", base+query, root, "")
		require.Equal(t, 422, r.Status, "%s: %s", query, r.Body)
		require.Contains(t, string(r.Body), field)
	}
	for _, query := range []string{"?limit=0", "?user_id=0", "?offset=-1"} {
		r := send(t, "GET", base+"/audit"+query, root, "")
		require.Equal(t, 422, r.Status, "audit%s: %s", query, r.Body)
	}
	vera := userByName(t, s, root, "vera")
	one := fmt.Sprintf("%s/%d", base, vera.ID)
	r := send(t, "GET", one, root, "")
	require.Equal(t, 200, r.Status)
	var got userView
	r.JSON(t, &got)
	require.Equal(t, vera, got)
	require.Equal(t, 404, send(t, "GET", base+"/999999", root, "").Status)
	require.Equal(t, 404, send(t, "PUT", base+"/999999", root, `{"is_active":false}`).Status)
	for body, field := range map[string]string{
		`{}`:                   "body",
		`{"roles":["boss"]}`:   "body.roles[0]",
		`{"is_active":"no"}`:   "body.is_active",
		`{"name":"x"}`:         "body.name",
		`{"roles":"observer"}`: "body.roles",
	} {
		r := send(t, "PUT", one, root, body)
		require.Equal(t, 422, r.Status, "%s: %s", body, r.Body)
		require.Contains(t, string(r.Body), field, body)
	}
	r = send(t, "PUT", one, root, `{"roles":["observer","viewer","observer"]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &got)
	require.Equal(t, []string{"observer", "viewer"}, got.Roles)
	require.True(t, got.IsActive)

	// Not for non-admins, nor for API tokens.
	for _, req := range []struct{ method, url, body string }{{"GET", base, ""}, {"GET", base + "/audit", ""}, {"GET", one, ""}, {"PUT", one, `{"is_active":false}`}} {
		require.Equal(t, 403, send(t, req.method, req.url, viewer, req.body).Status, "%s %s", req.method, req.url)
	}
}

// Forged JWTs, signed with the real signing key, are refused: a crit header, and uid and sub
// naming different users.
func TestForgedJWTsRefused(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	s.JWT(t, "bob", authn.RoleViewer)
	rootUser, bobUser := userByName(t, s, root, "root"), userByName(t, s, root, "bob")

	pemBytes, err := os.ReadFile(s.SigningKeyFile)
	require.NoError(t, err)
	block, _ := pem.Decode(pemBytes)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	priv := key.(ed25519.PrivateKey)
	sign := func(uid int64, sub string, header map[string]any) string {
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
			"iss": "obsops", "aud": "obsops", "sub": sub, "uid": uid, "roles": []string{"admin"},
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		})
		tok.Header["kid"] = authn.KeyID(priv.Public().(ed25519.PublicKey))
		for k, v := range header {
			tok.Header[k] = v
		}
		str, err := tok.SignedString(priv)
		require.NoError(t, err)
		return str
	}
	remote := remoteAuthenticator(s)
	// The key is right: the same token without the forgery is accepted.
	require.Equal(t, 200, send(t, "GET", s.GatewayURL+"/api/users", sign(rootUser.ID, "root", nil), "").Status)
	for name, forged := range map[string]string{
		"crit header":                      sign(rootUser.ID, "root", map[string]any{"crit": []string{"exp"}}),
		"uid of root, sub bob":             sign(rootUser.ID, "bob", nil),
		"uid of bob, sub root":             sign(bobUser.ID, "root", nil),
		"uid of nobody":                    sign(999999, "root", nil),
		"crit naming an unknown extension": sign(rootUser.ID, "root", map[string]any{"crit": []string{"x-obsops"}, "x-obsops": true}),
	} {
		for _, base := range []string{s.URLs["authtoken"], s.GatewayURL} {
			r := send(t, "GET", base+"/api/users", forged, "")
			require.Equal(t, 401, r.Status, "%s via %s: %s", name, base, r.Body)
		}
		require.Equal(t, 401, remoteStatus(remote, forged, authn.Roles(authn.RoleAdmin)), name)
	}
}

// Redis losing the directory (a flush) loses nothing: authtoken writes it again within
// seconds, and the services keep their copy meanwhile.
func TestUserDirectorySurvivesARedisFlush(t *testing.T) {
	s := testenv.StartSuite(t, authtokenBehindGateway())
	root := s.JWT(t, "root", authn.RoleAdmin)
	s.JWT(t, "eve", authn.RoleAdmin)
	eve := userByName(t, s, root, "eve")
	remote := remoteAuthenticator(s)
	require.Equal(t, 200, send(t, "PUT", s.URLs["authtoken"]+fmt.Sprintf("/api/users/%d", eve.ID), root, `{"is_active":false}`).Status)
	eveJWT := s.JWT(t, "eve") // a session issued by the command line after the disable
	waitStatus(t, time.Now(), "disabled before the flush", 401, func() int { return remoteStatus(remote, eveJWT, authn.AnyUser()) })

	rdb := s.Redis.Client()
	ctx := context.Background()
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.Equal(t, 401, remoteStatus(remote, eveJWT, authn.AnyUser()), "the copy stays in force")
	start := time.Now()
	require.Eventually(t, func() bool { return rdb.Exists(ctx, contract.UserDirectoryKey).Val() == 1 }, revocationBound, 50*time.Millisecond)
	t.Logf("directory rewritten %s after the flush", time.Since(start))
	fresh := authn.NewDirectory(rdb, nil)
	defer fresh.Close()
	_, err := fresh.Check(ctx, eve.ID, "eve", nil, nil)
	require.ErrorIs(t, err, authn.ErrUserDisabled, "a service starting after the flush knows it too")
}

// Another real service, through the gateway: the site service shows an admin the full
// /health report (which address failed); a disabled admin's JWT gets the anonymous one within
// 5 s, through the site binary's own copy of the user directory.
func TestDisabledAdminLosesTheSiteAdminView(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"transfer", "catalog", "ingest"}})
	root := s.JWT(t, "root", authn.RoleAdmin)
	eve := s.JWT(t, "eve", authn.RoleAdmin)
	eveUser := userByName(t, s, root, "eve")
	detail := func(cred string) string {
		r := send(t, "GET", s.GatewayURL+"/health", cred, "")
		var h struct {
			Services map[string]struct {
				Detail string `json:"detail"`
			} `json:"services"`
		}
		r.JSON(t, &h)
		return h.Services["catalog"].Detail
	}
	require.NotEmpty(t, detail(eve), "an admin sees why catalog failed")
	require.Empty(t, detail(""), "anonymous callers do not")

	start := time.Now()
	require.Equal(t, 200, send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", eveUser.ID), root, `{"is_active":false}`).Status)
	took := waitStatus(t, start, "site's admin view for a disabled admin", 0, func() int { return len(detail(eve)) })
	t.Logf("site stopped treating the disabled admin as admin %s after the change", took)
	require.NotEmpty(t, detail(root))
}

// Every route of the suite that an admin may use and others may not (the access table's rules
// naming role admin), as the gateway serves it: a disabled admin's JWT is refused on each
// within 5 s, whichever service owns it.
func TestDisabledAdminRefusedOnEveryServiceThroughTheGateway(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	root := s.JWT(t, "root", authn.RoleAdmin)
	eve := s.JWT(t, "eve", authn.RoleAdmin)
	eveUser := userByName(t, s, root, "eve")

	r := send(t, "GET", s.GatewayURL+"/openapi.json", "", "")
	require.Equal(t, 200, r.Status)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	r.JSON(t, &doc)
	var routes []adminRoute
	services := map[string]bool{}
	for key, rule := range authn.Access() {
		method, path, _ := strings.Cut(key, " ")
		if !rule.JWT || !slices.Contains(rule.JWTRoles, authn.RoleAdmin) {
			continue
		}
		if _, served := doc.Paths[path][strings.ToLower(method)]; !served {
			continue // not built yet
		}
		// An id nothing has: a write that got through must not change anything.
		routes = append(routes, adminRoute{method, strings.ReplaceAll(path, "{id}", "999999999")})
		services[strings.Split(path, "/")[1]] = true
	}
	t.Logf("%d routes under %v", len(routes), services)
	require.True(t, services["api"], "authtoken's routes are served")
	for _, rt := range routes {
		require.NotContains(t, []int{401, 403}, rt.call(t, s.GatewayURL, eve), "before: %s %s", rt.method, rt.path)
	}
	start := time.Now()
	require.Equal(t, 200, send(t, "PUT", s.GatewayURL+fmt.Sprintf("/api/users/%d", eveUser.ID), root, `{"is_active":false}`).Status)
	var slowest time.Duration
	for _, rt := range routes {
		slowest = max(slowest, waitStatus(t, start, rt.method+" "+rt.path, 401, func() int { return rt.call(t, s.GatewayURL, eve) }))
	}
	t.Logf("all refused within %s", slowest)
}

// TestNumberedUsername: a first login whose username is taken tries name-2, name-3, …, each
// still a valid username of at most 255 bytes cut at a character boundary.
func TestNumberedUsername(t *testing.T) {
	require.Equal(t, "bob", authtoken.NumberedUsername("bob", 1))
	require.Equal(t, "bob-2", authtoken.NumberedUsername("bob", 2))
	long := strings.Repeat("é", 200) // 400 bytes
	got := authtoken.NumberedUsername(long[:254], 12)
	require.LessOrEqual(t, len(got), 255)
	require.True(t, strings.HasSuffix(got, "-12"))
	require.True(t, utf8.ValidString(got))
	require.True(t, authtoken.ValidUsername(got))
}
