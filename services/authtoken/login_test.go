package authtoken_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	_ "github.com/lib/pq"
	"github.com/oauth2-proxy/mockoidc"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// person is a user the in-process identity provider vouches for, with the profile claims
// authtoken reads (mockoidc's own MockUser has no name claim). With userinfoOnly the ID token
// carries only the subject and the profile comes from the userinfo endpoint, as with ZITADEL.
type person struct {
	sub, username, email, name string
	userinfoOnly               bool
	emailUnverified            bool // the provider says email_verified false
}

func (p person) ID() string { return p.sub }

func (p person) Userinfo([]string) ([]byte, error) {
	return json.Marshal(map[string]any{"sub": p.sub, "preferred_username": p.username, "email": p.email, "name": p.name,
		"email_verified": !p.emailUnverified})
}

func (p person) Claims(_ []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	if p.userinfoOnly {
		return &personClaims{IDTokenClaims: base}, nil
	}
	return &personClaims{IDTokenClaims: base, PreferredUsername: p.username, Email: p.email, Name: p.name,
		EmailVerified: p.email != "" && !p.emailUnverified}, nil
}

type personClaims struct {
	*mockoidc.IDTokenClaims
	PreferredUsername string `json:"preferred_username,omitempty"`
	Email             string `json:"email,omitempty"`
	EmailVerified     bool   `json:"email_verified"`
	Name              string `json:"name,omitempty"`
}

type sessionUser struct {
	ID               int64    `json:"id"`
	Username         string   `json:"username"`
	Email            string   `json:"email"`
	DisplayName      string   `json:"display_name"`
	Roles            []string `json:"roles"`
	IsServiceAccount bool     `json:"is_service_account"`
}

type loginResult struct {
	AccessToken string      `json:"access_token"`
	TokenType   string      `json:"token_type"`
	ExpiresAt   time.Time   `json:"expires_at"`
	User        sessionUser `json:"user"`
}

type me struct {
	User            sessionUser `json:"user"`
	AuthenticatedBy string      `json:"authenticated_by"`
	Token           *struct {
		ID     int64    `json:"id"`
		Scopes []string `json:"scopes"`
	} `json:"token"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// loginFlow is a login walked like a browser: gateway /idp/login, the provider, back to the
// gateway's /idp/callback.
type loginFlow struct {
	suite   *testenv.Suite
	idp     *mockoidc.MockOIDC
	browser *http.Client
}

// begin starts a login and returns the provider's authorization URL.
func (f *loginFlow) begin(t *testing.T) *url.URL {
	t.Helper()
	r := get(t, f.browser, f.suite.GatewayURL+"/idp/login", "")
	require.Equal(t, http.StatusFound, r.Status, "body: %s", r.Body)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	loc, err := url.Parse(r.Header.Get("Location"))
	require.NoError(t, err)
	return loc
}

// authorize lets the provider authenticate who at authURL and returns where it sends the
// browser.
func (f *loginFlow) authorize(t *testing.T, authURL *url.URL, who mockoidc.User) *url.URL {
	t.Helper()
	f.idp.QueueUser(who)
	r := get(t, f.browser, authURL.String(), "")
	require.Equal(t, http.StatusFound, r.Status, "provider: %s", r.Body)
	cb, err := url.Parse(r.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, f.suite.GatewayURL+"/idp/callback", cb.Scheme+"://"+cb.Host+cb.Path)
	return cb
}

// login walks the whole flow for who and returns the session and the callback URL used.
func (f *loginFlow) login(t *testing.T, who mockoidc.User) (loginResult, *url.URL) {
	t.Helper()
	cb := f.authorize(t, f.begin(t), who)
	r := get(t, f.browser, cb.String(), "")
	require.Equal(t, http.StatusOK, r.Status, "callback: %s", r.Body)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	var res loginResult
	r.JSON(t, &res)
	return res, cb
}

// me asks the gateway's /auth/me who token is.
func (f *loginFlow) me(t *testing.T, token string) me {
	t.Helper()
	r := get(t, f.browser, f.suite.GatewayURL+"/auth/me", token)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	var m me
	r.JSON(t, &m)
	return m
}

func withState(u *url.URL, state string) string {
	c := *u
	q := c.Query()
	q.Set("state", state)
	c.RawQuery = q.Encode()
	return c.String()
}

// TestLoginEndToEnd drives the identity-provider login through the real binaries and the
// gateway against an in-process OIDC provider (the one true external boundary).
func TestLoginEndToEnd(t *testing.T) {
	idp, err := mockoidc.NewServer(nil)
	require.NoError(t, err)
	idpAddr := testenv.FreeAddr(t) // the provider starts only after authtoken
	issuer := "http://" + idpAddr + mockoidc.IssuerBase

	t.Cleanup(func() {
		if idp.Server != nil {
			_ = idp.Shutdown()
		}
	})
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"authtoken"}})
	restartAuthtoken(t, s, map[string]string{
		"OPS_OIDC_ISSUER":        issuer,
		"OPS_OIDC_CLIENT_ID":     idp.ClientID,
		"OPS_OIDC_CLIENT_SECRET": idp.ClientSecret,
		"OPS_OIDC_REDIRECT_URL":  s.GatewayURL + "/idp/callback",
		"OPS_BOOTSTRAP_ADMINS":   "carol, alice",
	})
	f := &loginFlow{suite: s, idp: idp, browser: browser(t)}
	// The steps build on each other: stop at the first that fails.
	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("provider not up yet: 503, then discovered on a later login", func(t *testing.T) {
		r := get(t, f.browser, s.GatewayURL+"/idp/login", "")
		require.Equal(t, http.StatusServiceUnavailable, r.Status)
		require.Contains(t, problemDetail(t, r), "identity provider is unavailable")

		ln, err := net.Listen("tcp", idpAddr)
		require.NoError(t, err)
		require.NoError(t, idp.Start(ln, nil))
		require.Equal(t, issuer, idp.Issuer())
	})

	alice := person{sub: "sub-alice", username: "alice", email: "alice@example.org", name: "Alice Liddell"}
	var aliceLogin loginResult
	var aliceCallback *url.URL
	step("authorization request uses PKCE S256, a nonce and a single-use state kept 10 minutes", func(t *testing.T) {
		authURL := f.begin(t)
		require.Equal(t, idp.AuthorizationEndpoint(), authURL.Scheme+"://"+authURL.Host+authURL.Path)
		q := authURL.Query()
		require.Equal(t, "code", q.Get("response_type"))
		require.Equal(t, idp.ClientID, q.Get("client_id"))
		require.Equal(t, s.GatewayURL+"/idp/callback", q.Get("redirect_uri"))
		require.Equal(t, "S256", q.Get("code_challenge_method"))
		require.Len(t, q.Get("code_challenge"), 43)
		require.Len(t, q.Get("nonce"), 43)
		require.Len(t, q.Get("state"), 43)
		require.ElementsMatch(t, []string{"openid", "profile", "email"}, strings.Fields(q.Get("scope")))

		opts, err := redis.ParseURL(s.Redis.URL)
		require.NoError(t, err)
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		ttl, err := rdb.TTL(context.Background(), "ops:oidc:state:"+q.Get("state")).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 9*time.Minute)
		require.LessOrEqual(t, ttl, 10*time.Minute)

		aliceCallback = f.authorize(t, authURL, alice)
		r := get(t, f.browser, aliceCallback.String(), "")
		require.Equal(t, http.StatusOK, r.Status, "callback: %s", r.Body)
		r.JSON(t, &aliceLogin)
	})

	step("the session JWT is the service's own and /auth/me names the user", func(t *testing.T) {
		require.Equal(t, "Bearer", aliceLogin.TokenType)
		require.Equal(t, "alice", aliceLogin.User.Username)
		require.Equal(t, "alice@example.org", aliceLogin.User.Email)
		require.Equal(t, "Alice Liddell", aliceLogin.User.DisplayName)
		require.Equal(t, []string{"admin", "viewer"}, aliceLogin.User.Roles, "bootstrap admin plus the new-user role")
		require.WithinDuration(t, time.Now().Add(8*time.Hour), aliceLogin.ExpiresAt, time.Minute)

		var claims authn.Claims
		tok, _, err := jwt.NewParser().ParseUnverified(aliceLogin.AccessToken, &claims)
		require.NoError(t, err)
		require.Equal(t, "EdDSA", tok.Header["alg"])
		r := get(t, f.browser, s.GatewayURL+"/.well-known/jwks.json", "")
		require.Equal(t, http.StatusOK, r.Status)
		var set authn.JWKSet
		r.JSON(t, &set)
		require.Len(t, set.Keys, 1)
		require.Equal(t, set.Keys[0].Kid, tok.Header["kid"])
		require.Equal(t, "obsops", claims.Issuer)
		require.Equal(t, jwt.ClaimStrings{"obsops"}, claims.Audience)
		require.Equal(t, "alice", claims.Subject)
		require.Equal(t, aliceLogin.User.ID, claims.UID)
		require.Equal(t, []string{"admin", "viewer"}, claims.Roles)
		require.Equal(t, aliceLogin.ExpiresAt.Unix(), claims.ExpiresAt.Unix())

		m := f.me(t, aliceLogin.AccessToken)
		require.Equal(t, "jwt", m.AuthenticatedBy)
		require.Equal(t, aliceLogin.User, m.User)
		require.Nil(t, m.Token)
		require.NotNil(t, m.ExpiresAt)
		require.True(t, aliceLogin.ExpiresAt.Equal(*m.ExpiresAt))
	})

	step("the login is bound to the browser by a short-lived HttpOnly SameSite=Lax cookie", func(t *testing.T) {
		other := browser(t)
		r := get(t, other, s.GatewayURL+"/idp/login", "")
		require.Equal(t, http.StatusFound, r.Status)
		var c *http.Cookie
		for _, ck := range (&http.Response{Header: r.Header}).Cookies() {
			if ck.Name == "obsops_login" {
				c = ck
			}
		}
		require.NotNil(t, c, "Set-Cookie: %v", r.Header.Values("Set-Cookie"))
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteLaxMode, c.SameSite)
		require.Equal(t, "/idp/callback", c.Path, "sent to the callback only")
		require.Equal(t, 600, c.MaxAge, "lives as long as the state")
		require.False(t, c.Secure, "the public URL here is http")
		loc, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.NotContains(t, c.Value, loc.Query().Get("state"), "the cookie holds a hash of the state, not the state")
	})

	step("login CSRF: a callback without the browser's cookie is refused (400)", func(t *testing.T) {
		cb := f.authorize(t, f.begin(t), alice)
		r := get(t, noRedirects(), cb.String(), "") // a browser that never started this login
		require.Equal(t, http.StatusBadRequest, r.Status, "body: %s", r.Body)
		require.Contains(t, problemDetail(t, r), "did not start the login")
		r = get(t, f.browser, cb.String(), "")
		require.Equal(t, http.StatusBadRequest, r.Status, "the refused callback spent its state")
	})

	step("login CSRF: an attacker's callback in the victim's browser is refused (403)", func(t *testing.T) {
		attacker := &loginFlow{suite: s, idp: idp, browser: browser(t)}
		planted := attacker.authorize(t, attacker.begin(t), person{sub: "sub-mallory", username: "mallory"})
		f.begin(t) // the victim has a login cookie of their own
		r := get(t, f.browser, planted.String(), "")
		require.Equal(t, http.StatusForbidden, r.Status, "body: %s", r.Body)
		require.Contains(t, problemDetail(t, r), "another browser")
		r = get(t, attacker.browser, planted.String(), "")
		require.Equal(t, http.StatusBadRequest, r.Status, "and the planted state is spent")
	})

	step("reused state: 400", func(t *testing.T) {
		r := get(t, f.browser, aliceCallback.String(), "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, problemDetail(t, r), "already used")
	})

	step("tampered state: 400, and the genuine callback still works", func(t *testing.T) {
		cb := f.authorize(t, f.begin(t), alice)
		state := cb.Query().Get("state")
		flipped := "A"
		if state[0] == 'A' {
			flipped = "B"
		}
		for _, bad := range []string{flipped + state[1:], state + "x", "", "not-a-state"} {
			r := get(t, f.browser, withState(cb, bad), "")
			require.Equal(t, http.StatusBadRequest, r.Status, "state %q", bad)
			require.Contains(t, problemDetail(t, r), "login state")
		}
		r := get(t, f.browser, cb.String(), "")
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	})

	step("a code from another login attempt is refused (PKCE binds it)", func(t *testing.T) {
		first := f.authorize(t, f.begin(t), alice)
		second := f.begin(t)
		r := get(t, f.browser, withState(first, second.Query().Get("state")), "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, problemDetail(t, r), "rejected the authorization code")
	})

	step("an ID token bound to another nonce is refused", func(t *testing.T) {
		authURL := f.begin(t)
		q := authURL.Query()
		q.Set("nonce", "a-nonce-this-login-never-issued")
		authURL.RawQuery = q.Encode()
		r := get(t, f.browser, f.authorize(t, authURL, alice).String(), "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, problemDetail(t, r), "ID token")
	})

	step("provider error: 400 with its description, and the state is spent", func(t *testing.T) {
		state := f.begin(t).Query().Get("state")
		q := url.Values{"state": {state}, "error": {"access_denied"}, "error_description": {"The user said no"}}
		r := get(t, f.browser, s.GatewayURL+"/idp/callback?"+q.Encode(), "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		detail := problemDetail(t, r)
		require.Contains(t, detail, "access_denied")
		require.Contains(t, detail, "The user said no")

		q = url.Values{"state": {state}, "code": {"any"}}
		r = get(t, f.browser, s.GatewayURL+"/idp/callback?"+q.Encode(), "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, problemDetail(t, r), "already used")
	})

	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	countUsers := func(t *testing.T) int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM users`).Scan(&n))
		return n
	}

	var bob loginResult
	step("a plain user gets viewer only", func(t *testing.T) {
		bob, _ = f.login(t, person{sub: "sub-bob", username: "bob", email: "bob@example.org", name: "Bob"})
		require.Equal(t, []string{"viewer"}, bob.User.Roles)
		m := f.me(t, bob.AccessToken)
		require.Equal(t, []string{"viewer"}, m.User.Roles)
	})

	step("a second login refreshes the profile without a second user", func(t *testing.T) {
		before := countUsers(t)
		again, _ := f.login(t, person{sub: "sub-bob", username: "bob", email: "robert@example.org", name: "Robert"})
		require.Equal(t, bob.User.ID, again.User.ID)
		require.Equal(t, "robert@example.org", again.User.Email)
		require.Equal(t, "Robert", again.User.DisplayName)
		require.Equal(t, []string{"viewer"}, again.User.Roles)
		require.Equal(t, before, countUsers(t))
		m := f.me(t, bob.AccessToken) // the earlier JWT still works and shows the fresh profile
		require.Equal(t, "robert@example.org", m.User.Email)
	})

	step("without preferred_username the email is the username", func(t *testing.T) {
		res, _ := f.login(t, person{sub: "sub-dave", email: "dave@example.org"})
		require.Equal(t, "dave@example.org", res.User.Username)
	})

	step("a profile only in userinfo is read from there", func(t *testing.T) {
		res, _ := f.login(t, person{sub: "sub-erin", username: "erin", email: "erin@example.org", name: "Erin", userinfoOnly: true})
		require.Equal(t, "erin", res.User.Username)
		require.Equal(t, "erin@example.org", res.User.Email)
		require.Equal(t, "Erin", res.User.DisplayName)
	})

	step("a first login whose username is taken gets an account of its own, never the existing one", func(t *testing.T) {
		res, _ := f.login(t, person{sub: "sub-impostor", username: "bob", email: "x@example.org"})
		require.Equal(t, "bob-2", res.User.Username)
		require.NotEqual(t, bob.User.ID, res.User.ID)
		require.Equal(t, []string{"viewer"}, res.User.Roles)
		again, _ := f.login(t, person{sub: "sub-impostor", username: "bob"})
		require.Equal(t, res.User.ID, again.User.ID, "the identity finds its own account again")
	})

	step("an unverified email is neither the username nor stored", func(t *testing.T) {
		res, _ := f.login(t, person{sub: "sub-frank", email: "bob@example.org", emailUnverified: true})
		require.Equal(t, "sub-frank", res.User.Username, "the subject, not the unverified address")
		require.Empty(t, res.User.Email)
	})

	// The command line makes accounts that no login may take over by username: carol is a
	// bootstrap admin name, and her account was made (as admin) before her first login.
	carolID := int64(0)
	step("a login never takes over a command-line account; an admin links it, audited", func(t *testing.T) {
		s.Admin(t, "create-user", "--user", "carol", "--roles", "admin")
		require.NoError(t, db.QueryRow(`SELECT id FROM users WHERE username = 'carol'`).Scan(&carolID))
		first, _ := f.login(t, person{sub: "sub-carol", username: "carol"})
		require.Equal(t, "carol-2", first.User.Username, "a new account, not carol's")
		require.Equal(t, []string{"viewer"}, first.User.Roles, "bootstrap admin names count only for the account a login creates under that name")

		root := s.JWT(t, "root-admin", "admin")
		link := func(body map[string]any) testenv.Response {
			return testenv.Call(t, http.DefaultClient, http.MethodPut, fmt.Sprintf("%s/api/users/%d/identity", s.GatewayURL, carolID), root, body)
		}
		r := link(map[string]any{"issuer": issuer, "subject": "sub-carol"})
		require.Equal(t, http.StatusConflict, r.Status, "the identity is carol-2's: %s", r.Body)
		require.Contains(t, string(r.Body), "carol-2")
		r = testenv.Call(t, http.DefaultClient, http.MethodPut, fmt.Sprintf("%s/api/users/%d/identity", s.GatewayURL, carolID), bob.AccessToken,
			map[string]any{"issuer": issuer, "subject": "sub-carol", "move": true})
		require.Equal(t, http.StatusForbidden, r.Status, "only admins link: %s", r.Body)
		r = link(map[string]any{"issuer": issuer, "subject": "sub-carol", "move": true})
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)

		again, _ := f.login(t, person{sub: "sub-carol", username: "carol"})
		require.Equal(t, carolID, again.User.ID, "now the login reaches carol's account")
		require.Equal(t, []string{"admin"}, again.User.Roles)
		var audited int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM user_audit WHERE action = 'link_identity' AND user_id = $1 AND actor = 'root-admin'`, carolID).Scan(&audited))
		require.Equal(t, 1, audited)
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM user_audit WHERE action = 'link_identity' AND user_id = $1`, first.User.ID).Scan(&audited))
		require.Equal(t, 1, audited, "the move is audited on the account it left too")
	})

	step("service accounts never log in and cannot be linked", func(t *testing.T) {
		s.Admin(t, "create-service-token", "--account", "svc-login", "--scopes", "read:data")
		var id int64
		require.NoError(t, db.QueryRow(`SELECT id FROM users WHERE username = 'svc-login'`).Scan(&id))
		r := testenv.Call(t, http.DefaultClient, http.MethodPut, fmt.Sprintf("%s/api/users/%d/identity", s.GatewayURL, id),
			s.JWT(t, "root-admin", "admin"), map[string]any{"issuer": issuer, "subject": "sub-svc"})
		require.Equal(t, http.StatusConflict, r.Status, "body: %s", r.Body)
		// even an identity written into the row by hand does not let it log in
		_, err := db.Exec(`UPDATE users SET oidc_issuer = $1, oidc_subject = 'sub-svc' WHERE id = $2`, issuer, id)
		require.NoError(t, err)
		cb := f.authorize(t, f.begin(t), person{sub: "sub-svc", username: "svc-login"})
		r = get(t, f.browser, cb.String(), "")
		require.Equal(t, http.StatusForbidden, r.Status, "body: %s", r.Body)
		require.Contains(t, problemDetail(t, r), "service accounts")
	})

	step("a demoted bootstrap admin stays demoted at the next login", func(t *testing.T) {
		r := testenv.Call(t, http.DefaultClient, http.MethodPut, fmt.Sprintf("%s/api/users/%d", s.GatewayURL, aliceLogin.User.ID),
			s.JWT(t, "root-admin", "admin"), map[string]any{"roles": []string{"viewer"}})
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
		again, _ := f.login(t, alice)
		require.Equal(t, aliceLogin.User.ID, again.User.ID)
		require.Equal(t, []string{"viewer"}, again.User.Roles, "OPS_BOOTSTRAP_ADMINS does not re-grant admin")
	})

	step("a disabled user cannot log in, and their JWT stops working", func(t *testing.T) {
		_, err := db.Exec(`UPDATE users SET is_active = false WHERE username = 'bob'`)
		require.NoError(t, err)
		r := get(t, f.browser, s.GatewayURL+"/auth/me", bob.AccessToken)
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer"))
		cb := f.authorize(t, f.begin(t), person{sub: "sub-bob", username: "bob"})
		r = get(t, f.browser, cb.String(), "")
		require.Equal(t, http.StatusForbidden, r.Status, "body: %s", r.Body)
	})

	step("with OPS_UI_REDIRECT_URL the callback redirects with the JWT in the fragment", func(t *testing.T) {
		restartAuthtoken(t, s, map[string]string{"OPS_UI_REDIRECT_URL": "https://ui.example.org/app#stale"})
		cb := f.authorize(t, f.begin(t), alice)
		r := get(t, f.browser, cb.String(), "")
		require.Equal(t, http.StatusFound, r.Status, "body: %s", r.Body)
		require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		to, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "https://ui.example.org/app", to.Scheme+"://"+to.Host+to.Path)
		require.Empty(t, to.RawQuery, "the JWT must not be in the query (servers and logs see it)")
		frag, err := url.ParseQuery(to.Fragment)
		require.NoError(t, err)
		require.Equal(t, "Bearer", frag.Get("token_type"))
		require.NotEmpty(t, frag.Get("expires_at"))
		m := f.me(t, frag.Get("access_token"))
		require.Equal(t, "alice", m.User.Username)
		require.Equal(t, "jwt", m.AuthenticatedBy)
	})
}
