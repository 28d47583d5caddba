package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
)

// appRedirect is the registered redirect URI of the test client; nothing listens there, the
// browser stops when the provider sends it there.
const appRedirect = "http://127.0.0.1:1/idp/callback"

// start runs devidp in-process on a free loopback port and returns its issuer.
func start(t *testing.T) *Config {
	t.Helper()
	cfg, err := parseConfig([]string{"-addr", "127.0.0.1:0", "-redirect-uris", appRedirect}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Issuer = "http://" + ln.Addr().String()
	h, err := newProvider(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cfg
}

type discovery struct {
	Issuer        string `json:"issuer"`
	Authorization string `json:"authorization_endpoint"`
	Token         string `json:"token_endpoint"`
	Userinfo      string `json:"userinfo_endpoint"`
	JWKS          string `json:"jwks_uri"`
}

func discover(t *testing.T, issuer string) discovery {
	t.Helper()
	resp, err := http.Get(issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d discovery
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Issuer != issuer {
		t.Fatalf("discovery issuer %q, want %q (clients compare it exactly)", d.Issuer, issuer)
	}
	return d
}

// browser follows redirects like a browser, with cookies, but stops at the app's redirect URI.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), appRedirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

var authRequestID = regexp.MustCompile(`name="id" value="([^"]+)"`)

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLoginWithDevUser walks the authorization code flow with PKCE and a nonce the way obsops
// and a browser do: login form, wrong then right password, code exchange, ID token and userinfo.
// userinfo is what the provider's userinfo endpoint says of the person.
type userinfo struct {
	Sub               string `json:"sub"`
	PreferredUsername string `json:"preferred_username"`
	Email             string `json:"email"`
	EmailVerified     bool   `json:"email_verified"`
	Name              string `json:"name"`
}

// codeFlow logs username in with password through the authorization code flow with PKCE, as
// obsops does (a wrong password first, which must show the form again), and returns the ID
// token's subject and the userinfo.
func codeFlow(t *testing.T, cfg *Config, username, password string) (string, userinfo) {
	t.Helper()
	d := discover(t, cfg.Issuer)
	ctx := context.Background()
	oc := &oauth2.Config{
		ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: appRedirect,
		Endpoint: oauth2.Endpoint{AuthURL: d.Authorization, TokenURL: d.Token},
		Scopes:   []string{"openid", "profile", "email"},
	}
	verifier := oauth2.GenerateVerifier()
	authURL := oc.AuthCodeURL("the-state", oauth2.SetAuthURLParam("nonce", "the-nonce"), oauth2.S256ChallengeOption(verifier))

	b := browser(t)
	resp, err := b.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	m := authRequestID.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("expected the login form, got %d at %s:\n%s", resp.StatusCode, resp.Request.URL, page)
	}
	loginURL := cfg.Issuer + "/login/username"

	resp, err = b.PostForm(loginURL, url.Values{"id": {m[1]}, "username": {username}, "password": {"not-the-password"}})
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp); !strings.Contains(page, "username or password wrong") {
		t.Fatalf("a wrong password must show the form again with an error:\n%s", page)
	}

	resp, err = b.PostForm(loginURL, url.Values{"id": {m[1]}, "username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("after the login the provider must redirect to the app, got %d at %s", resp.StatusCode, resp.Request.URL)
	}
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Query().Get("state") != "the-state" || back.Query().Get("code") == "" {
		t.Fatalf("redirect to the app without code or state: %s", back)
	}

	if _, err := oc.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
		t.Fatal("the code must not be exchangeable with another PKCE verifier")
	}
	tok, err := oc.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	v := rp.NewIDTokenVerifier(cfg.Issuer, cfg.ClientID, rp.NewRemoteKeySet(http.DefaultClient, d.JWKS),
		rp.WithNonce(func(context.Context) string { return "the-nonce" }))
	claims, err := rp.VerifyIDToken[*oidc.IDTokenClaims](ctx, raw, v)
	if err != nil {
		t.Fatalf("ID token: %v", err)
	}

	req, _ := http.NewRequest(http.MethodGet, d.Userinfo, nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info userinfo
	if err := json.Unmarshal([]byte(readAll(t, resp)), &info); err != nil {
		t.Fatal(err)
	}
	return claims.Subject, info
}

func TestLoginWithDevUser(t *testing.T) {
	cfg := start(t)
	sub, info := codeFlow(t, cfg, "alice", "wonderland")
	if sub != "dev-alice" {
		t.Fatalf("sub %q, want the stable dev-alice", sub)
	}
	if info.Sub != "dev-alice" || info.PreferredUsername != "alice" || info.Email != "alice@example.org" || !info.EmailVerified || info.Name != "Alice Liddell" {
		t.Fatalf("userinfo %+v", info)
	}
}

// TestAddedUser: a test adds a person to the running provider (POST /dev/users) with the
// preferred_username, email and email_verified it needs, and logs in as them; a taken id or
// username is refused.
func TestAddedUser(t *testing.T) {
	cfg := start(t)
	add := func(body string) int {
		resp, err := http.Post(cfg.Issuer+"/dev/users", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.StatusCode
	}
	if got := add(`{"id":"sub-mallory","username":"alice-admin","password":"pw","email":"alice@example.org","email_verified":false,"first_name":"M","last_name":"Allory"}`); got != http.StatusCreated {
		t.Fatalf("add: %d", got)
	}
	if got := add(`{"id":"sub-other","username":"alice","password":"pw"}`); got != http.StatusConflict {
		t.Fatalf("a taken username: %d, want 409", got)
	}
	if got := add(`{"id":"sub-x"}`); got != http.StatusBadRequest {
		t.Fatalf("no username or password: %d, want 400", got)
	}
	sub, info := codeFlow(t, cfg, "alice-admin", "pw")
	if sub != "sub-mallory" || info.PreferredUsername != "alice-admin" || info.Email != "alice@example.org" || info.EmailVerified {
		t.Fatalf("sub %q, userinfo %+v", sub, info)
	}
}

// TestUnregisteredRedirectRefused checks that the provider never sends a browser (and a code)
// to a redirect URI the client did not register.
func TestUnregisteredRedirectRefused(t *testing.T) {
	cfg := start(t)
	d := discover(t, cfg.Issuer)
	q := url.Values{
		"client_id": {cfg.ClientID}, "response_type": {"code"}, "scope": {"openid"}, "state": {"s"},
		"redirect_uri": {"http://evil.example/steal"},
	}
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(d.Authorization + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if loc := resp.Header.Get("Location"); strings.Contains(loc, "evil.example") {
		t.Fatalf("redirected to an unregistered URI: %s", loc)
	}
}

func TestOnlyLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9998", "192.0.2.1:9998", ":9998"} {
		if _, err := parseConfig([]string{"-addr", addr}, func(string) string { return "" }); err == nil {
			t.Errorf("-addr %s accepted; devidp must bind to loopback only", addr)
		}
	}
	if _, err := parseConfig(nil, func(k string) string {
		return map[string]string{"OPS_DEVIDP_ADDR": "[::1]:9998"}[k]
	}); err != nil {
		t.Errorf("IPv6 loopback from the environment refused: %v", err)
	}
}
