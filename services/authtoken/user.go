package authtoken

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// User is a person who logged in through the identity provider, or a service account.
type User struct {
	ID          int64      `json:"id" db:"id"`
	Username    string     `json:"username" db:"username"`
	Email       string     `json:"email,omitempty" db:"email"`
	DisplayName string     `json:"display_name,omitempty" db:"display_name"`
	IsService   bool       `json:"is_service_account" db:"is_service"`
	IsActive    bool       `json:"is_active" db:"is_active" doc:"False once disabled: no credential of the user verifies anywhere (within 5 s)."`
	Roles       []string   `json:"roles" db:"-" doc:"Roles held now: admin, observer, viewer, service."`
	CreatedAt   time.Time  `json:"created_at" db:"created_at"`
	LastLoginAt *time.Time `json:"last_login_at,omitempty" db:"last_login_at"`
	// SessionsValidAfter: session JWTs issued before it are refused (set when disabled).
	SessionsValidAfter *time.Time `json:"sessions_valid_after,omitempty" db:"sessions_valid_after" doc:"Session JWTs issued before this instant are refused (set when the user was disabled)."`
}

// ErrIdentityConflict means an identity-provider account cannot be given the account asked for:
// the identity is linked to another user, or a first login found no free username.
var ErrIdentityConflict = errors.New("identity conflict")

// ErrServiceAccountLogin means a service account was to log in through the identity provider or
// be linked to an identity: service accounts authenticate with their API tokens only.
var ErrServiceAccountLogin = errors.New("service accounts cannot log in through the identity provider")

// NumberedUsername is the n-th username a first login tries for name (n from 1): name itself,
// then name-2, name-3, …, cut so that it stays a valid username.
func NumberedUsername(name string, n int) string {
	if n <= 1 {
		return name
	}
	suffix := "-" + strconv.Itoa(n)
	if len(name)+len(suffix) > 255 {
		name = name[:255-len(suffix)]
		for !utf8.ValidString(name) {
			name = name[:len(name)-1]
		}
	}
	return name + suffix
}

// ErrLastAdmin means a change would leave no active admin.
var ErrLastAdmin = errors.New("the last active admin cannot be disabled or lose the admin role")

// ValidUsername reports whether name can be a username: 1–255 printable characters without
// spaces or control characters.
func ValidUsername(name string) bool {
	if len(name) == 0 || len(name) > 255 {
		return false
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// Audit actions of user changes (user_audit.action).
const (
	AuditDisable  = "disable"
	AuditEnable   = "enable"
	AuditSetRoles = "set_roles"
	// AuditGrantRoles: roles added by login (bootstrap admins, viewer for a new user), the
	// admin command line or service-token creation.
	AuditGrantRoles = "grant_roles"
	// AuditLinkIdentity: an admin linked the user to an identity-provider account.
	AuditLinkIdentity = "link_identity"
)

// UserListQuery selects a page of users.
type UserListQuery struct {
	Q      string // part of the username, email or display name (case-insensitive)
	Role   string // only users holding this role
	Active *bool  // only active (true) or disabled (false) users
	Limit  int
	Offset int
}

// UserAuditEntry is one row of the user audit log.
type UserAuditEntry struct {
	ID          int64          `json:"id"`
	At          time.Time      `json:"at"`
	ActorUserID *int64         `json:"actor_user_id" doc:"The acting user; null for the admin command line and logins."`
	Actor       string         `json:"actor" doc:"Username of the actor, admin-cli, or login." example:"alice"`
	UserID      int64          `json:"user_id" doc:"The user changed."`
	Action      string         `json:"action" enum:"disable,enable,set_roles,grant_roles,link_identity"`
	Detail      map[string]any `json:"detail" doc:"What changed: roles before and after (set_roles), roles added (grant_roles), the username (disable, enable), the identity linked and the one it replaced (link_identity)."`
}

// UserAuditQuery selects a page of the user audit log, optionally of one user.
type UserAuditQuery struct {
	UserID int64 // 0: every user
	Limit  int
	Offset int
}

// UserChanges are what a user update sets; a nil field stays as it is.
type UserChanges struct {
	Roles  *[]string // the complete new role set
	Active *bool
}

// UserStore keeps users and their roles (package postgres).
type UserStore interface {
	ByID(ctx context.Context, id int64) (User, error)
	ByUsername(ctx context.Context, name string) (User, error)
	Ensure(ctx context.Context, name string, service bool) (User, bool, error)
	// UpsertOIDC finds the account linked to the identity (issuer, subject) — never by
	// username — refreshing its profile, or creates one under a free username (created true).
	UpsertOIDC(ctx context.Context, issuer, subject, username, email, displayName string) (User, bool, error)
	// LinkIdentity links an existing account to an identity, audited (ErrServiceAccountLogin;
	// ErrIdentityConflict when another account has it, unless move takes it from there).
	LinkIdentity(ctx context.Context, id int64, issuer, subject string, move bool, a Audit) (User, error)
	GrantRoles(ctx context.Context, userID int64, roles []string, by string) error
	// EnsureService and SetBindings: see AccountStore.
	EnsureService(ctx context.Context, name string, kb *KindBindings) (User, bool, KindBindings, error)
	SetBindings(ctx context.Context, username string, kb KindBindings, a Audit) (ServiceAccountBindings, error)
	List(ctx context.Context, q UserListQuery) ([]User, int64, error)
	// Update applies ch in one transaction with its audit rows; it refuses a change that
	// leaves no active admin (ErrLastAdmin). Disabling sets sessions_valid_after to now.
	Update(ctx context.Context, id int64, ch UserChanges, a Audit) (User, error)
	// AuditLog returns a page of the user audit log, newest first, and how many entries match.
	AuditLog(ctx context.Context, q UserAuditQuery) ([]UserAuditEntry, int64, error)
	// Directory reads every user as the services' user directory holds them and calls
	// publish with them, serialised with every other Directory call: publishers write in the
	// order they read.
	Directory(ctx context.Context, publish func([]authn.DirectoryEntry) error) error
}

// DirectoryPublisher makes the user directory known to every service (package directory):
// it writes the entries to Redis, announces them and installs them in this process.
type DirectoryPublisher interface {
	Publish(ctx context.Context, entries []authn.DirectoryEntry) error
}

// UserService owns users: their lookup, administration (roles, active flag) and how changes
// reach every service. After every change it invalidates the user's cached API token records
// (so authtoken's own verification sees the change at once) and republishes the user
// directory (so every service's session-JWT checks see it within seconds).
type UserService struct {
	Store     UserStore
	Cache     TokenCache         // nil: no token cache to invalidate
	Directory DirectoryPublisher // nil: nothing to publish
	Log       *slog.Logger
}

// Get returns a user by id (admins, or the user themself).
func (s *UserService) Get(ctx context.Context, caller Caller, id int64) (User, error) {
	if !caller.Admin && caller.UserID != id {
		return User{}, ErrForbidden
	}
	return s.Store.ByID(ctx, id)
}

// Current returns the caller's own account as stored now.
func (s *UserService) Current(ctx context.Context, id int64) (User, error) {
	return s.Store.ByID(ctx, id)
}

// ByUsername returns a user by name.
func (s *UserService) ByUsername(ctx context.Context, name string) (User, error) {
	return s.Store.ByUsername(ctx, name)
}

// List returns a page of users (admins only).
func (s *UserService) List(ctx context.Context, caller Caller, q UserListQuery) (Page[User], error) {
	if !caller.Admin {
		return Page[User]{}, ErrForbidden
	}
	if q.Role != "" && !authn.ValidRole(q.Role) {
		return Page[User]{}, problem.Field("query.role", "unknown role (admin, observer, viewer, service)", q.Role)
	}
	q.Limit, q.Offset = pageBounds(q.Limit, q.Offset)
	items, total, err := s.Store.List(ctx, q)
	if items == nil {
		items = []User{}
	}
	return Page[User]{Items: items, Total: total, Limit: q.Limit, Offset: q.Offset}, err
}

// AuditLog returns a page of the user audit log (admins only).
func (s *UserService) AuditLog(ctx context.Context, caller Caller, q UserAuditQuery) (Page[UserAuditEntry], error) {
	if !caller.Admin {
		return Page[UserAuditEntry]{}, ErrForbidden
	}
	q.Limit, q.Offset = pageBounds(q.Limit, q.Offset)
	items, total, err := s.Store.AuditLog(ctx, q)
	if items == nil {
		items = []UserAuditEntry{}
	}
	return Page[UserAuditEntry]{Items: items, Total: total, Limit: q.Limit, Offset: q.Offset}, err
}

// Update changes a user's roles and/or active flag (admins only). Disabling a user or taking
// a role away takes effect for their API tokens at once and for their session JWTs
// everywhere within seconds; the last active admin cannot be disabled or lose admin
// (ErrLastAdmin).
func (s *UserService) Update(ctx context.Context, caller Caller, id int64, ch UserChanges) (User, error) {
	if !caller.Admin {
		return User{}, ErrForbidden
	}
	if ch.Roles == nil && ch.Active == nil {
		return User{}, problem.Field("body", "give at least one of roles, is_active", nil)
	}
	if ch.Roles != nil {
		roles := []string{}
		for i, r := range *ch.Roles {
			if !authn.ValidRole(r) {
				return User{}, problem.Field(fmt.Sprintf("body.roles[%d]", i), "unknown role (admin, observer, viewer, service)", r)
			}
			if !slices.Contains(roles, r) {
				roles = append(roles, r)
			}
		}
		slices.Sort(roles)
		ch.Roles = &roles
	}
	u, err := s.Store.Update(ctx, id, ch, Audit{Actor: caller})
	if err != nil {
		return User{}, err
	}
	s.Changed(ctx, id)
	return u, nil
}

// SetActiveByName disables or enables the user called name (the admin command line).
func (s *UserService) SetActiveByName(ctx context.Context, caller Caller, name string, active bool) (User, error) {
	u, err := s.Store.ByUsername(ctx, name)
	if err != nil {
		return User{}, err
	}
	return s.Update(ctx, caller, u.ID, UserChanges{Active: &active})
}

// Ensure returns the user called name, creating it first if needed.
func (s *UserService) Ensure(ctx context.Context, name string, service bool) (User, bool, error) {
	u, created, err := s.Store.Ensure(ctx, name, service)
	if err == nil && created {
		s.Changed(ctx, u.ID)
	}
	return u, created, err
}

// EnsureService returns the service account called name, creating it first with kind and
// bindings kb (see AccountStore.EnsureService); a new account is published in the directory.
func (s *UserService) EnsureService(ctx context.Context, name string, kb *KindBindings) (User, bool, KindBindings, error) {
	u, created, stored, err := s.Store.EnsureService(ctx, name, kb)
	if err == nil && created {
		s.Changed(ctx, u.ID)
	}
	return u, created, stored, err
}

// SetBindings replaces a service account's kind and bindings, audited (AccountStore.SetBindings),
// and drops its cached token records so that its next request is checked against them.
func (s *UserService) SetBindings(ctx context.Context, username string, kb KindBindings, a Audit) (ServiceAccountBindings, error) {
	acct, err := s.Store.SetBindings(ctx, username, kb, a)
	if err == nil {
		s.Changed(ctx, acct.UserID)
	}
	return acct, err
}

// UpsertOIDC records a login from the identity provider (see UserStore.UpsertOIDC). A new user is
// published in the directory, so that the session JWT about to be issued is known everywhere; a
// returning user's login changes nothing the directory holds (roles and state are untouched), so
// it publishes nothing.
func (s *UserService) UpsertOIDC(ctx context.Context, issuer, subject, username, email, displayName string) (User, bool, error) {
	u, created, err := s.Store.UpsertOIDC(ctx, issuer, subject, username, email, displayName)
	if err == nil && created {
		s.Changed(ctx, u.ID)
	}
	return u, created, err
}

// LinkIdentity links user id to the identity-provider account (issuer, subject), so that its
// logins reach this account (admins only; audited). This is the one way an existing account —
// one created on the command line, or a second account a first login made because the username
// was taken — is tied to a login: logins never take an account over by its username.
//
// An identity already linked to another account (typically the one a first login created under
// name-2 before the admin linked the person's real account) is refused unless move is set, which
// takes it off that account.
func (s *UserService) LinkIdentity(ctx context.Context, caller Caller, id int64, issuer, subject string, move bool) (User, error) {
	if !caller.Admin {
		return User{}, ErrForbidden
	}
	if strings.TrimSpace(issuer) == "" {
		return User{}, problem.Field("body.issuer", "the identity provider's issuer URL is required", nil)
	}
	if strings.TrimSpace(subject) == "" {
		return User{}, problem.Field("body.subject", "the account's subject (sub) at the identity provider is required", nil)
	}
	u, err := s.Store.LinkIdentity(ctx, id, issuer, subject, move, Audit{Actor: caller})
	if err != nil {
		return User{}, err
	}
	s.Changed(ctx, id)
	return u, nil
}

// GrantRoles gives a user roles (idempotent), recording who granted them.
func (s *UserService) GrantRoles(ctx context.Context, userID int64, roles []string, by string) error {
	if err := s.Store.GrantRoles(ctx, userID, roles, by); err != nil {
		return err
	}
	s.Changed(ctx, userID)
	return nil
}

// changeTimeout bounds what follows a committed user change (cache invalidation, publishing).
const changeTimeout = 2 * time.Second

// Changed makes a committed change to user id take effect: the user's cached token records
// are dropped and the directory is published. Failures are logged, not returned: the change
// stands, and the periodic directory sync (authn.DirectorySyncInterval) publishes it once
// Redis is back.
func (s *UserService) Changed(ctx context.Context, id int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), changeTimeout)
	defer cancel()
	if s.Cache != nil {
		if err := s.Cache.InvalidateUser(ctx, id); err != nil && s.Log != nil {
			s.Log.Error("user change: token cache invalidation failed (Redis unavailable): the user's cached API token records may lag until they expire",
				"user_id", id, "max_staleness", s.Cache.TTL(), "error", err)
		}
	}
	if err := s.Sync(ctx); err != nil && s.Log != nil {
		s.Log.Error("user change: publishing the user directory failed; retried every "+authn.DirectorySyncInterval.String(), "user_id", id, "error", err)
	}
}

// Sync publishes the user directory as PostgreSQL holds it now.
func (s *UserService) Sync(ctx context.Context) error {
	if s.Directory == nil {
		return nil
	}
	return s.Store.Directory(ctx, func(entries []authn.DirectoryEntry) error {
		return s.Directory.Publish(ctx, entries)
	})
}

// RunSync publishes the directory every authn.DirectorySyncInterval until ctx ends, so a
// Redis that lost it (flushed, restarted without its AOF) or a change whose publishing failed
// is repaired within seconds.
func (s *UserService) RunSync(ctx context.Context) {
	t := time.NewTicker(authn.DirectorySyncInterval)
	defer t.Stop()
	var failing bool
	for {
		if err := s.Sync(ctx); err != nil {
			if !failing && s.Log != nil && ctx.Err() == nil {
				s.Log.Warn("user directory sync failed; retrying", "error", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
