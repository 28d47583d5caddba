package login

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// Users is the part of the user service a login needs (authtoken.UserService).
type Users interface {
	UpsertOIDC(ctx context.Context, issuer, subject, username, email, displayName string) (authtoken.User, bool, error)
	GrantRoles(ctx context.Context, userID int64, roles []string, by string) error
}

// Service is the whole login: the OIDC flow, then the user record and the session JWT.
//
// Accounts at login: a login reaches the account linked to its identity (issuer, subject), never
// one found by username; a first login creates an account (under name-2, name-3, … when the
// username is taken), and an existing account is tied to an identity only by an admin
// (UserService.LinkIdentity). Service accounts never log in.
//
// Roles at login: an account created by the login gets DefaultRole (OPS_LOGIN_DEFAULT_ROLE:
// viewer unless set to observer), and admin too when its
// username is named in OPS_BOOTSTRAP_ADMINS; a returning user's roles are never changed by a
// login, so an admin who removes a bootstrap admin's role is not overruled at the next login.
// Other roles are granted with `authtoken admin` or PUT /api/users/{id}.
type Service struct {
	OIDC            *OIDC // nil when no identity provider is configured
	Users           Users
	Issuer          *signing.Issuer
	BootstrapAdmins []string
	// DefaultRole is the role of an account a login creates (viewer when empty).
	DefaultRole string
	// MainSiteName names the main site where a secondary sends a first login (OPS_MAIN_SITE_NAME).
	MainSiteName string
	Log          *slog.Logger
}

// New builds the login service from the authtoken configuration; without OPS_OIDC_ISSUER
// logins answer ErrNotConfigured.
func New(cfg *authtoken.Config, rdb redis.Cmdable, users Users, issuer *signing.Issuer, log *slog.Logger) *Service {
	s := &Service{Users: users, Issuer: issuer, Log: log, DefaultRole: cfg.LoginDefaultRole, MainSiteName: cfg.MainSiteName}
	for _, name := range cfg.BootstrapAdmins {
		if name = strings.TrimSpace(name); name != "" {
			s.BootstrapAdmins = append(s.BootstrapAdmins, name)
		}
	}
	if cfg.OIDCIssuer != "" {
		s.OIDC = NewOIDC(Provider{
			Issuer:       cfg.OIDCIssuer,
			ClientID:     cfg.OIDCClientID,
			ClientSecret: cfg.OIDCClientSecret,
			RedirectURL:  cfg.OIDCRedirectURL,
			Scopes:       cfg.OIDCScopes,
		}, rdb, &http.Client{Timeout: 10 * time.Second})
	}
	return s
}

// CookieName is the cookie that binds a login to the browser that started it (login CSRF).
const CookieName = "obsops_login"

// Started is a begun login: where to send the browser, and the cookie to set on it.
type Started struct {
	URL    string
	Cookie http.Cookie
}

// Start begins a login: the provider URL to redirect the browser to and the cookie that binds
// the login to this browser (HttpOnly, SameSite=Lax, Secure when the callback is https, sent
// only to the callback's path, living as long as the state).
// app is the native app that started it (nil: a browser login); it must be valid (ValidApp).
func (s *Service) Start(ctx context.Context, app *App) (Started, error) {
	if s.OIDC == nil {
		return Started{}, ErrNotConfigured
	}
	if app != nil {
		if err := ValidApp(app); err != nil {
			return Started{}, err
		}
	}
	u, state, err := s.OIDC.Begin(ctx, app)
	if err != nil {
		s.logFailure("login start failed", err)
		return Started{}, err
	}
	return Started{URL: u, Cookie: s.cookie(Binding(state))}, nil
}

// cookie is the binding cookie with value, scoped to the callback as the browser reaches it.
func (s *Service) cookie(value string) http.Cookie {
	path, secure := "/idp/callback", false
	if u, err := url.Parse(s.OIDC.cfg.RedirectURL); err == nil && u.Path != "" {
		path, secure = u.Path, u.Scheme == "https"
	}
	return http.Cookie{
		Name: CookieName, Value: value, Path: path, MaxAge: int(StateTTL / time.Second),
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode,
	}
}

// Callback is what the provider sends the browser back with (OAuth 2.0 §4.1.2), and the
// browser's binding cookie.
type Callback struct {
	State            string
	Code             string
	Error            string // set when the provider refused, e.g. access_denied
	ErrorDescription string
	Binding          string // the value of the browser's CookieName cookie ("" if none)
}

// Session is a completed login: the service's own JWT and the user it names. A login a native
// app started ends instead with a one-time code for the app (AppRedirect) and no JWT yet.
type Session struct {
	Token     string
	ExpiresAt time.Time
	User      authtoken.User
	// AppRedirect, for a native app's login: its loopback redirect URI with the one-time code
	// and its state, where the browser is sent. Token is then empty: the app exchanges the code
	// at POST /idp/token (Exchange).
	AppRedirect string
}

// Finish completes a login from the provider's callback: the state is consumed, the identity
// verified, the user created or refreshed, roles granted per the rules above, and a session
// JWT issued.
func (s *Service) Finish(ctx context.Context, cb Callback) (Session, error) {
	if s.OIDC == nil {
		return Session{}, ErrNotConfigured
	}
	if cb.Error != "" {
		s.OIDC.Abandon(ctx, cb.State)
		detail := "the identity provider refused the login: " + clip(cb.Error)
		if cb.ErrorDescription != "" {
			detail += ": " + clip(cb.ErrorDescription)
		}
		return Session{}, &Error{Status: http.StatusBadRequest, Detail: detail}
	}
	id, app, err := s.OIDC.Complete(ctx, cb.State, cb.Code, cb.Binding)
	if err != nil {
		s.logFailure("login failed", err)
		return Session{}, err
	}
	u, err := s.account(ctx, id)
	if err != nil {
		s.logFailure("login failed", err)
		return Session{}, err
	}
	if app != nil {
		redirect, err := s.grantCode(ctx, app, u)
		if err != nil {
			s.logFailure("login failed", err)
			return Session{}, err
		}
		s.Log.Info("login", "user_id", u.ID, "username", u.Username, "roles", u.Roles, "app", "loopback")
		return Session{User: u, AppRedirect: redirect}, nil
	}
	tok, exp, err := s.Issuer.Issue(u.ID, u.Username, u.Roles)
	if err != nil {
		return Session{}, fmt.Errorf("issue JWT: %w", err)
	}
	s.Log.Info("login", "user_id", u.ID, "username", u.Username, "roles", u.Roles)
	return Session{Token: tok, ExpiresAt: exp, User: u}, nil
}

// account records the user of id (created or refreshed, roles granted per the rules above).
func (s *Service) account(ctx context.Context, id Identity) (authtoken.User, error) {
	if id.Username == "" {
		return authtoken.User{}, &Error{Status: http.StatusBadRequest, Detail: "the identity provider gave no usable username (preferred_username, email or sub)"}
	}
	u, created, err := s.Users.UpsertOIDC(ctx, id.Issuer, id.Subject, id.Username, id.Email, id.DisplayName)
	if errors.Is(err, authtoken.ErrFirstLoginAtMain) {
		return authtoken.User{}, &Error{Status: http.StatusConflict, Detail: "this is a secondary site, where accounts are not created: log in at " +
			s.mainSite() + " first (your account is created there), then here", Err: err}
	}
	if errors.Is(err, authtoken.ErrIdentityConflict) {
		return authtoken.User{}, &Error{Status: http.StatusConflict, Detail: fmt.Sprintf("no free username for %q: ask an admin to link your identity to an account", id.Username), Err: err}
	}
	if err != nil {
		return authtoken.User{}, fmt.Errorf("record user: %w", err)
	}
	if u.IsService {
		return authtoken.User{}, &Error{Status: http.StatusForbidden, Detail: "service accounts cannot log in through the identity provider", Err: authtoken.ErrServiceAccountLogin}
	}
	if !u.IsActive {
		return authtoken.User{}, &Error{Status: http.StatusForbidden, Detail: "this account is disabled"}
	}
	var grant []string
	if created {
		role := s.DefaultRole
		if role == "" {
			role = authn.RoleViewer
		}
		grant = append(grant, role)
		if slices.Contains(s.BootstrapAdmins, u.Username) {
			grant = append(grant, authn.RoleAdmin)
		}
	}
	if len(grant) > 0 {
		// Granted through the user service, which audits the grant, drops the user's cached API
		// token records and republishes the user directory, like every other role change.
		if err := s.Users.GrantRoles(ctx, u.ID, grant, "login"); err != nil {
			return authtoken.User{}, fmt.Errorf("grant roles: %w", err)
		}
		// The user now holds these too, sorted like the store sorts them (ORDER BY role).
		u.Roles = append(slices.Clone(u.Roles), grant...)
		slices.Sort(u.Roles)
		u.Roles = slices.Compact(u.Roles)
	}
	return u, nil
}

// mainSite names the main site in a message.
func (s *Service) mainSite() string {
	if s.MainSiteName == "" {
		return "the main site"
	}
	return "the main site " + strconv.Quote(s.MainSiteName)
}

func (s *Service) logFailure(msg string, err error) {
	var le *Error
	if errors.As(err, &le) && le.Status < 500 {
		s.Log.Warn(msg, "error", err.Error())
		return
	}
	s.Log.Error(msg, "error", err.Error())
}

// clip bounds text taken from the callback's query before it is echoed in a problem.
func clip(s string) string {
	const max = 200
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
