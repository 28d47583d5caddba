package login

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"

	"github.com/obsops/obsops/services/authtoken"
)

// App is a login started by a native app on the user's machine (the obsops command), OAuth 2.0
// for native apps (RFC 8252): the app listens on a loopback address, the browser is sent there
// with a one-time code at the end of the login, and the app exchanges the code, with the PKCE
// verifier only it knows, for the session JWT at POST /idp/token. The JWT never travels in a URL.
type App struct {
	RedirectURI   string `json:"redirect_uri"`    // http://127.0.0.1:PORT/… or http://[::1]:PORT/…
	CodeChallenge string `json:"code_challenge"`  // BASE64URL(SHA-256(code_verifier)), RFC 7636 S256
	State         string `json:"state,omitempty"` // the app's own state, echoed back to it
}

// CodeTTL is how long the one-time code of an app login can be exchanged.
const CodeTTL = 60 * time.Second

// codeKeyPrefix is the Redis key prefix of one-time codes (keyed by the code's SHA-256).
const codeKeyPrefix = "ops:oidc:code:"

// ValidApp checks an app login's parameters: the redirect URI must be http on a loopback IP
// literal with a port (RFC 8252 §7.3, §8.3: "localhost" is refused, it may resolve elsewhere),
// without user info, query or fragment; the challenge must be an S256 challenge (43 base64url
// characters); the state at most 256 printable ASCII characters.
func ValidApp(app *App) error {
	u, err := url.Parse(app.RedirectURI)
	switch {
	case err != nil || u.Scheme != "http" || u.Host == "":
		return fieldError("query.redirect_uri", "redirect_uri must be an http URL on a loopback address, e.g. http://127.0.0.1:PORT/callback")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fieldError("query.redirect_uri", "redirect_uri must have no user info, query or fragment")
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return fieldError("query.redirect_uri", "redirect_uri must be on a loopback IP address (127.0.0.1 or [::1]; RFC 8252): a login's code is only ever sent to the machine the login started on")
	}
	if u.Port() == "" {
		return fieldError("query.redirect_uri", "redirect_uri must name the port the app listens on")
	}
	if len(app.CodeChallenge) != 43 || strings.Trim(app.CodeChallenge, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return fieldError("query.code_challenge", "code_challenge must be BASE64URL(SHA-256(code_verifier)), 43 characters (RFC 7636, S256)")
	}
	if len(app.State) > 256 || strings.IndexFunc(app.State, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return fieldError("query.state", "state must be at most 256 printable ASCII characters")
	}
	return nil
}

// issuedCode is what a one-time code stands for in Redis: who logged in and the app's binding.
type issuedCode struct {
	UserID        int64    `json:"user_id"`
	Username      string   `json:"username"`
	Roles         []string `json:"roles"`
	Email         string   `json:"email,omitempty"`
	DisplayName   string   `json:"display_name,omitempty"`
	RedirectURI   string   `json:"redirect_uri"`
	CodeChallenge string   `json:"code_challenge"`
}

func codeKey(code string) string {
	sum := sha256.Sum256([]byte(code))
	return codeKeyPrefix + hex.EncodeToString(sum[:])
}

// grantCode stores a fresh one-time code for u (single use, CodeTTL; only its hash is a key) and
// returns the app's redirect URI carrying it and the app's state.
func (s *Service) grantCode(ctx context.Context, app *App, u authtoken.User) (string, error) {
	code := oauth2.GenerateVerifier()
	b, err := json.Marshal(issuedCode{UserID: u.ID, Username: u.Username, Roles: u.Roles, Email: u.Email,
		DisplayName: u.DisplayName, RedirectURI: app.RedirectURI, CodeChallenge: app.CodeChallenge})
	if err != nil {
		return "", err
	}
	if err := s.OIDC.rdb.Set(ctx, codeKey(code), b, CodeTTL).Err(); err != nil {
		return "", unavailableStore(err)
	}
	q := url.Values{"code": {code}}
	if app.State != "" {
		q.Set("state", app.State)
	}
	return app.RedirectURI + "?" + q.Encode(), nil
}

// Exchange is POST /idp/token: the code is consumed (once, whatever the outcome), then the PKCE
// verifier and the redirect URI must match what the login was started with; the answer is a
// session JWT issued now.
func (s *Service) Exchange(ctx context.Context, code, verifier, redirectURI string) (Session, error) {
	if s.OIDC == nil {
		return Session{}, ErrNotConfigured
	}
	if code == "" {
		return Session{}, fieldError("body.code", "code is required")
	}
	b, err := s.OIDC.rdb.GetDel(ctx, codeKey(code)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Session{}, &Error{Status: http.StatusBadRequest, Field: "body.code", Detail: "unknown, expired or already used code: log in again"}
	}
	if err != nil {
		return Session{}, unavailableStore(err)
	}
	var ic issuedCode
	if err := json.Unmarshal(b, &ic); err != nil {
		return Session{}, fmt.Errorf("stored code: %w", err)
	}
	sum := sha256.Sum256([]byte(verifier))
	if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(ic.CodeChallenge)) != 1 {
		return Session{}, &Error{Status: http.StatusBadRequest, Field: "body.code_verifier", Detail: "code_verifier does not match the login's code_challenge; the code is spent: log in again"}
	}
	if redirectURI != ic.RedirectURI {
		return Session{}, &Error{Status: http.StatusBadRequest, Field: "body.redirect_uri", Detail: "redirect_uri differs from the one the login was started with; the code is spent: log in again"}
	}
	tok, exp, err := s.Issuer.Issue(ic.UserID, ic.Username, ic.Roles)
	if err != nil {
		return Session{}, fmt.Errorf("issue JWT: %w", err)
	}
	u := authtoken.User{ID: ic.UserID, Username: ic.Username, Roles: ic.Roles, Email: ic.Email, DisplayName: ic.DisplayName, IsActive: true}
	return Session{Token: tok, ExpiresAt: exp, User: u}, nil
}

func fieldError(field, detail string) *Error {
	status := http.StatusUnprocessableEntity
	if strings.HasPrefix(field, "body.") {
		status = http.StatusBadRequest
	}
	return &Error{Status: status, Field: field, Detail: detail}
}
