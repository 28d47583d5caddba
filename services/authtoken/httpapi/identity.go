package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/login"
)

// SessionUser is a user as the identity endpoints show it.
type SessionUser struct {
	ID               int64    `json:"id"`
	Username         string   `json:"username"`
	Email            string   `json:"email,omitempty"`
	DisplayName      string   `json:"display_name,omitempty"`
	Roles            []string `json:"roles" doc:"Roles held now: admin, observer, viewer, service."`
	IsServiceAccount bool     `json:"is_service_account"`
}

func sessionUser(u authtoken.User) SessionUser {
	roles := u.Roles
	if roles == nil {
		roles = []string{}
	}
	return SessionUser{ID: u.ID, Username: u.Username, Email: u.Email, DisplayName: u.DisplayName, Roles: roles, IsServiceAccount: u.IsService}
}

// LoginResult is the answer of /idp/callback when no UI redirect is configured.
type LoginResult struct {
	AccessToken string      `json:"access_token" doc:"Session JWT (EdDSA): send it as Authorization: Bearer <access_token>."`
	TokenType   string      `json:"token_type" enum:"Bearer"`
	ExpiresAt   time.Time   `json:"expires_at" doc:"When the JWT expires (RFC 3339, UTC); log in again after that."`
	User        SessionUser `json:"user"`
}

type loginOutput struct {
	Status       int
	Location     string      `header:"Location" doc:"The identity provider's authorization URL."`
	CacheControl string      `header:"Cache-Control"`
	SetCookie    http.Cookie `header:"Set-Cookie" doc:"obsops_login: binds the login to this browser (HttpOnly, SameSite=Lax, Secure over https; 10 minutes, sent only to /idp/callback)."`
}

type loginInput struct {
	RedirectURI         string `query:"redirect_uri" doc:"For a native app (the obsops command, RFC 8252): its loopback redirect URI, http://127.0.0.1:PORT/… or http://[::1]:PORT/…. The login then ends there with a one-time code, exchanged at POST /idp/token. Any other address is refused."`
	CodeChallenge       string `query:"code_challenge" doc:"With redirect_uri (required then): BASE64URL(SHA-256(code_verifier)) (RFC 7636)."`
	CodeChallengeMethod string `query:"code_challenge_method" enum:"S256," doc:"S256 (the only method; the default)."`
	State               string `query:"state" doc:"With redirect_uri: the app's state, sent back to it with the code."`
}

func (h *Handlers) startLogin(ctx context.Context, in *loginInput) (*loginOutput, error) {
	var app *login.App
	if in.RedirectURI != "" {
		app = &login.App{RedirectURI: in.RedirectURI, CodeChallenge: in.CodeChallenge, State: in.State}
	} else if in.CodeChallenge != "" || in.State != "" {
		return nil, huma.Error422UnprocessableEntity("code_challenge and state are for a native app's login and need redirect_uri",
			&huma.ErrorDetail{Location: "query.redirect_uri", Message: "required with code_challenge or state"})
	}
	started, err := h.Login.Start(ctx, app)
	if err != nil {
		return nil, loginProblem(err)
	}
	return &loginOutput{Status: http.StatusFound, Location: started.URL, CacheControl: "no-store", SetCookie: started.Cookie}, nil
}

type callbackInput struct {
	State            string `query:"state" doc:"The state /idp/login sent to the provider (single use, valid 10 minutes)."`
	Code             string `query:"code" doc:"Authorization code from the provider."`
	Error            string `query:"error" doc:"Set by the provider when the login was refused (e.g. access_denied)."`
	ErrorDescription string `query:"error_description" doc:"The provider's explanation of error."`
	Binding          string `cookie:"obsops_login" doc:"Set by /idp/login in the browser that started the login; without it, or with another browser's, the callback is refused."`
}

type callbackOutput struct {
	Body func(huma.Context)
}

func (h *Handlers) finishLogin(ctx context.Context, in *callbackInput) (*callbackOutput, error) {
	sess, err := h.Login.Finish(ctx, login.Callback{State: in.State, Code: in.Code, Error: in.Error, ErrorDescription: in.ErrorDescription, Binding: in.Binding})
	if err != nil {
		return nil, loginProblem(err)
	}
	return &callbackOutput{Body: func(hc huma.Context) {
		// The answer carries a credential: never cache it, never leak it in a Referer.
		hc.SetHeader("Cache-Control", "no-store")
		hc.SetHeader("Pragma", "no-cache")
		hc.SetHeader("Referrer-Policy", "no-referrer")
		if sess.AppRedirect != "" { // a native app's login: its one-time code, to its loopback listener
			hc.SetHeader("Location", sess.AppRedirect)
			hc.SetStatus(http.StatusFound)
			return
		}
		if h.UIRedirectURL != "" {
			hc.SetHeader("Location", uiRedirect(h.UIRedirectURL, sess))
			hc.SetStatus(http.StatusFound)
			return
		}
		hc.SetHeader("Content-Type", "application/json")
		hc.SetStatus(http.StatusOK)
		_ = json.NewEncoder(hc.BodyWriter()).Encode(LoginResult{
			AccessToken: sess.Token, TokenType: "Bearer", ExpiresAt: sess.ExpiresAt, User: sessionUser(sess.User),
		})
	}}, nil
}

// uiRedirect is the UI URL with the session in its fragment, which browsers never send to a
// server: #access_token=...&token_type=Bearer&expires_at=...&expires_in=...
func uiRedirect(ui string, s login.Session) string {
	base, _, _ := strings.Cut(ui, "#")
	frag := url.Values{}
	frag.Set("access_token", s.Token)
	frag.Set("token_type", "Bearer")
	frag.Set("expires_at", s.ExpiresAt.UTC().Format(time.RFC3339))
	frag.Set("expires_in", strconv.Itoa(int(time.Until(s.ExpiresAt).Seconds())))
	return base + "#" + frag.Encode()
}

// callbackResponses documents both answers of /idp/callback: JSON, or a redirect to the UI.
func callbackResponses(api huma.API) map[string]*huma.Response {
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(LoginResult{}), true, "LoginResult")
	return map[string]*huma.Response{
		"200": {
			Description: "Logged in (OPS_UI_REDIRECT_URL not set): the session JWT and the user.",
			Content:     map[string]*huma.MediaType{"application/json": {Schema: schema}},
		},
		"302": {
			Description: "Logged in (OPS_UI_REDIRECT_URL set): redirect to the UI with the session in the URL fragment: " +
				"#access_token=<JWT>&token_type=Bearer&expires_at=<RFC 3339>&expires_in=<seconds>.",
			Headers: map[string]*huma.Param{"Location": {Description: "The UI URL with the session in its fragment.", Schema: &huma.Schema{Type: "string"}}},
		},
		"400": {Description: "Unknown, expired or reused state; no login cookie (the login was not started in this browser); the provider refused the login (its error and description are in the detail); or the code or ID token was rejected."},
		"403": {Description: "The login was started in another browser (its login cookie names another state), or the account is disabled."},
		"409": {Description: "The username already belongs to another identity-provider account."},
		"503": {Description: "Login is not configured, the identity provider or Redis is unavailable, or (at a secondary site) the main site is unreachable: recording the user needs it."},
	}
}

// TokenRequest is the body of POST /idp/token.
type TokenRequest struct {
	GrantType    string `json:"grant_type" enum:"authorization_code" doc:"Always authorization_code."`
	Code         string `json:"code" minLength:"1" maxLength:"128" doc:"The one-time code the login sent to the app's redirect_uri (single use, valid 60 s)."`
	CodeVerifier string `json:"code_verifier" minLength:"43" maxLength:"128" doc:"The PKCE verifier whose S256 challenge started the login (RFC 7636)."`
	RedirectURI  string `json:"redirect_uri" minLength:"1" maxLength:"512" doc:"The redirect_uri the login was started with, exactly."`
}

type tokenInput struct {
	Body TokenRequest
}

type tokenOutput struct {
	CacheControl string `header:"Cache-Control"`
	Pragma       string `header:"Pragma"`
	Body         LoginResult
}

func (h *Handlers) exchangeCode(ctx context.Context, in *tokenInput) (*tokenOutput, error) {
	sess, err := h.Login.Exchange(ctx, in.Body.Code, in.Body.CodeVerifier, in.Body.RedirectURI)
	if err != nil {
		return nil, loginProblem(err)
	}
	return &tokenOutput{CacheControl: "no-store", Pragma: "no-cache", Body: LoginResult{
		AccessToken: sess.Token, TokenType: "Bearer", ExpiresAt: sess.ExpiresAt, User: sessionUser(sess.User),
	}}, nil
}

// loginProblem turns a login failure into its problem+json answer; causes stay in the log.
func loginProblem(err error) error {
	var le *login.Error
	if errors.As(err, &le) && errors.Is(err, authtoken.ErrFirstLoginAtMain) {
		return problem.WriteAtMainSite.New(le.Detail)
	}
	var refused *problem.Problem
	if errors.As(err, &refused) && refused.Kind() == problem.WriteAtMainSite {
		return refused // a change the login needs (roles of a bootstrap admin) made at the main only
	}
	if errors.As(err, &le) {
		if le.Field != "" {
			return huma.NewError(le.Status, le.Detail, &huma.ErrorDetail{Location: le.Field, Message: le.Detail})
		}
		return huma.NewError(le.Status, le.Detail)
	}
	if database.MainUnreachable(err) { // recording the user needs the main site
		return database.ErrMainUnreachable
	}
	return huma.Error500InternalServerError("login failed; see the authtoken log")
}

type jwksOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         authn.JWKSet
}

func (h *Handlers) jwks(_ context.Context, _ *struct{}) (*jwksOutput, error) {
	return &jwksOutput{CacheControl: "public, max-age=300", Body: h.Keys.JWKS()}, nil
}

// TokenInfo describes the API token a request authenticated with.
type TokenInfo struct {
	ID     int64    `json:"id"`
	Scopes []string `json:"scopes"`
}

// Me is the answer of /auth/me.
type Me struct {
	User            SessionUser  `json:"user"`
	AuthenticatedBy authn.Method `json:"authenticated_by" enum:"jwt,api_token" doc:"jwt: a session JWT; api_token: an API token."`
	Token           *TokenInfo   `json:"token,omitempty" doc:"The API token (api_token only)."`
	ExpiresAt       *time.Time   `json:"expires_at,omitempty" doc:"When the session JWT expires (jwt only)."`
}

type meOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         Me
}

func (h *Handlers) me(ctx context.Context, _ *struct{}) (*meOutput, error) {
	p := authn.PrincipalFrom(ctx)
	u, err := h.Users.Current(ctx, p.UserID)
	if errors.Is(err, problem.ErrNotFound) || (err == nil && !u.IsActive) {
		return nil, huma.ErrorWithHeaders(
			huma.Error401Unauthorized("the user of this credential no longer exists or is disabled"),
			http.Header{"WWW-Authenticate": {`Bearer realm="obsops", error="invalid_token"`}})
	}
	if err != nil {
		return nil, err
	}
	out := &meOutput{CacheControl: "no-store", Body: Me{User: sessionUser(u), AuthenticatedBy: p.Method}}
	switch p.Method {
	case authn.MethodAPIToken:
		scopes := p.Scopes
		if scopes == nil {
			scopes = []string{}
		}
		out.Body.Token = &TokenInfo{ID: p.TokenID, Scopes: scopes}
	case authn.MethodJWT:
		out.Body.ExpiresAt = p.ExpiresAt // verified by the authentication middleware
	}
	return out, nil
}
