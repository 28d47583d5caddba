// Package login signs people in through the identity provider: OpenID Connect authorization
// code flow with PKCE (S256) and a nonce, the pending state kept in Redis, and — once the
// provider vouches for someone — the user record and a session JWT of the service's own.
package login

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"

	"github.com/obsops/obsops/services/authtoken"
)

// StateTTL is how long a started login may take to come back to the callback.
const StateTTL = 10 * time.Minute

// stateKeyPrefix is the Redis key prefix of pending logins (one key per state, single use).
const stateKeyPrefix = "ops:oidc:state:"

// Provider configures the OIDC client.
type Provider struct {
	Issuer       string // exact issuer URL; discovery is at Issuer/.well-known/openid-configuration
	ClientID     string
	ClientSecret string
	RedirectURL  string // this service's /idp/callback as the browser reaches it (the gateway)
	Scopes       []string
}

// Identity is the person the identity provider vouched for.
type Identity struct {
	Issuer      string
	Subject     string
	Username    string // preferred_username, else the email if the provider verified it, else sub
	Email       string // only an address the provider says it verified (email_verified true)
	DisplayName string
}

// pending is what a started login leaves in Redis under its state.
type pending struct {
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`      // PKCE code verifier
	App      *App   `json:"app,omitempty"` // set when a native app (the obsops command) started the login
}

// OIDC runs the authorization code flow with one provider. The provider is discovered on the
// first login, not at start-up, and discovery is retried on later logins while it fails: the
// provider may come up after this service.
type OIDC struct {
	cfg  Provider
	rdb  redis.Cmdable
	http *http.Client

	mu sync.Mutex
	ep *endpoints // nil until discovery succeeds
}

// endpoints is what discovery yields.
type endpoints struct {
	provider *oidc.Provider
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// NewOIDC returns a flow for cfg that keeps pending logins in rdb and talks to the provider
// with client.
func NewOIDC(cfg Provider, rdb redis.Cmdable, client *http.Client) *OIDC {
	return &OIDC{cfg: cfg, rdb: rdb, http: client}
}

// discover returns the provider's endpoints, fetching its discovery document if not yet known.
// Concurrent logins wait for one discovery rather than each asking the provider.
func (o *OIDC) discover(ctx context.Context) (*endpoints, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ep != nil {
		return o.ep, nil
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, o.http), 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		return nil, unavailable(fmt.Errorf("discover %s: %w", o.cfg.Issuer, err))
	}
	o.ep = &endpoints{
		provider: p,
		oauth: &oauth2.Config{
			ClientID:     o.cfg.ClientID,
			ClientSecret: o.cfg.ClientSecret,
			Endpoint:     p.Endpoint(),
			RedirectURL:  o.cfg.RedirectURL,
			Scopes:       o.cfg.Scopes,
		},
		verifier: p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}),
	}
	return o.ep, nil
}

// Begin starts a login: it stores a fresh state, nonce and PKCE verifier in Redis for StateTTL
// and returns the provider's authorization URL to send the browser to, and the state (which
// the browser's binding cookie is made from, see Binding).
func (o *OIDC) Begin(ctx context.Context, app *App) (authURL, state string, err error) {
	ep, err := o.discover(ctx)
	if err != nil {
		return "", "", err
	}
	// State and nonce are made like the PKCE verifier: base64url of 32 random bytes (stateLen).
	state, nonce := oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	p := pending{Nonce: nonce, Verifier: oauth2.GenerateVerifier(), App: app}
	b, err := json.Marshal(p)
	if err != nil {
		return "", "", err
	}
	if err := o.rdb.Set(ctx, stateKeyPrefix+state, b, StateTTL).Err(); err != nil {
		return "", "", unavailableStore(err)
	}
	return ep.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(p.Verifier)), state, nil
}

// take consumes the pending login of state (at most once: GETDEL).
func (o *OIDC) take(ctx context.Context, state string) (pending, error) {
	var p pending
	if len(state) != stateLen {
		return p, errUnknownState
	}
	b, err := o.rdb.GetDel(ctx, stateKeyPrefix+state).Bytes()
	if errors.Is(err, redis.Nil) {
		return p, errUnknownState
	}
	if err != nil {
		return p, unavailableStore(err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, errUnknownState
	}
	return p, nil
}

// Abandon consumes the pending login of state without completing it (the provider answered
// with an error), so the state cannot be used afterwards.
func (o *OIDC) Abandon(ctx context.Context, state string) {
	_, _ = o.take(ctx, state)
}

// Complete finishes a login: it consumes state, checks that the browser bringing it back is the
// one that started it (binding, the value of its binding cookie, must be Binding(state)),
// exchanges code (with the PKCE verifier) at the provider, verifies the ID token (signature,
// issuer, audience = client id, expiry, nonce) and returns who logged in, and the native app
// that started the login (nil for a browser login). Profile claims missing
// from the ID token are read from the userinfo endpoint (some providers, e.g. ZITADEL, put them
// only there).
func (o *OIDC) Complete(ctx context.Context, state, code, binding string) (Identity, *App, error) {
	p, err := o.take(ctx, state)
	if err != nil {
		return Identity{}, nil, err
	}
	id, err := o.complete(ctx, p, state, code, binding)
	return id, p.App, err
}

func (o *OIDC) complete(ctx context.Context, p pending, state, code, binding string) (Identity, error) {
	// After take: a login brought back by another browser (login CSRF: an attacker's code in a
	// victim's browser) is refused and its state spent.
	if binding == "" {
		return Identity{}, errNoBinding
	}
	if subtle.ConstantTimeCompare([]byte(binding), []byte(Binding(state))) != 1 {
		return Identity{}, errOtherBrowser
	}
	if code == "" {
		return Identity{}, &Error{Status: http.StatusBadRequest, Detail: "the callback carries no authorization code"}
	}
	ep, err := o.discover(ctx)
	if err != nil {
		return Identity{}, err
	}
	ctx = oidc.ClientContext(ctx, o.http)
	tok, err := ep.oauth.Exchange(ctx, code, oauth2.VerifierOption(p.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return Identity{}, &Error{Status: http.StatusBadRequest, Detail: "the identity provider rejected the authorization code", Err: err}
		}
		return Identity{}, unavailable(fmt.Errorf("exchange code: %w", err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, &Error{Status: http.StatusBadGateway, Detail: "the identity provider returned no ID token", Err: errors.New("no id_token in token response")}
	}
	idt, err := ep.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, &Error{Status: http.StatusBadRequest, Detail: "the ID token from the identity provider is not valid", Err: err}
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(p.Nonce)) != 1 {
		return Identity{}, &Error{Status: http.StatusBadRequest, Detail: "the ID token from the identity provider is not valid", Err: errors.New("nonce mismatch")}
	}
	var c profile
	if err := idt.Claims(&c); err != nil {
		return Identity{}, &Error{Status: http.StatusBadGateway, Detail: "the ID token from the identity provider is not valid", Err: err}
	}
	if c.PreferredUsername == "" && c.Email == "" && ep.provider.UserInfoEndpoint() != "" {
		if err := fillFromUserinfo(ctx, ep.provider, tok, idt.Subject, &c); err != nil {
			return Identity{}, err
		}
	}
	return c.identity(idt.Issuer, idt.Subject), nil
}

// fillFromUserinfo reads profile claims from the userinfo endpoint; its subject must be the ID
// token's (OIDC Core §5.3.2).
func fillFromUserinfo(ctx context.Context, p *oidc.Provider, tok *oauth2.Token, subject string, c *profile) error {
	ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
	if err != nil {
		return unavailable(fmt.Errorf("userinfo: %w", err))
	}
	if ui.Subject != subject {
		return &Error{Status: http.StatusBadGateway, Detail: "the identity provider's userinfo names another subject", Err: errors.New("userinfo sub mismatch")}
	}
	return ui.Claims(c)
}

// profile is the part of the ID token (or userinfo) that describes the person.
type profile struct {
	PreferredUsername string `json:"preferred_username"`
	Email             string `json:"email"`
	EmailVerified     bool   `json:"email_verified"`
	Name              string `json:"name"`
}

// identity is who logged in. An email address the provider did not verify (email_verified
// absent or false) is neither the username nor stored: anyone can claim any address at some
// providers, and the address would otherwise name the account.
func (c profile) identity(issuer, subject string) Identity {
	email := ""
	if c.EmailVerified {
		email = c.Email
	}
	id := Identity{Issuer: issuer, Subject: subject, Email: email, DisplayName: c.Name}
	for _, u := range []string{c.PreferredUsername, email, subject} {
		if authtoken.ValidUsername(u) {
			id.Username = u
			break
		}
	}
	return id
}

// Binding is the value of the cookie that binds a login to the browser that started it: the
// SHA-256 of its state, base64url. The state travels in URLs (the provider, browser history);
// the cookie only in this browser, and only to the callback.
func Binding(state string) string {
	sum := sha256.Sum256([]byte(state))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// stateLen is the length of a state (and nonce): base64url of 32 random bytes, as
// oauth2.GenerateVerifier makes them.
const stateLen = 43
