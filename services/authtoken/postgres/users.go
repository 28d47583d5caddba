// Package postgres stores the authtoken service's users, roles and API tokens in PostgreSQL.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/services/authtoken"
)

// Users reads and writes users and their roles.
type Users struct {
	DB *sqlx.DB
}

// userColumns read a user row and, in the same query, the user's roles (sorted).
const userColumns = `id, username, COALESCE(email, '') AS email, COALESCE(display_name, '') AS display_name,
	is_service, is_active, created_at, last_login_at,
	ARRAY(SELECT role FROM user_roles WHERE user_id = users.id ORDER BY role) AS roles`

// userRow is a row of userColumns.
type userRow struct {
	authtoken.User
	RoleList pq.StringArray `db:"roles"`
}

func (r userRow) user() authtoken.User {
	u := r.User
	u.Roles = []string(r.RoleList)
	if u.Roles == nil {
		u.Roles = []string{}
	}
	return u
}

// ByID returns the user with id and their roles.
func (s *Users) ByID(ctx context.Context, id int64) (authtoken.User, error) {
	return s.one(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id)
}

// ByUsername returns the user called name and their roles.
func (s *Users) ByUsername(ctx context.Context, name string) (authtoken.User, error) {
	return s.one(ctx, `SELECT `+userColumns+` FROM users WHERE username = $1`, name)
}

func (s *Users) one(ctx context.Context, query string, arg any) (authtoken.User, error) {
	var r userRow
	if err := s.DB.GetContext(ctx, &r, query, arg); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, authtoken.ErrNotFound
		}
		return authtoken.User{}, err
	}
	return r.user(), nil
}

// Ensure returns the user called name, creating it first if needed (service marks a service
// account). created tells which happened.
func (s *Users) Ensure(ctx context.Context, name string, service bool) (u authtoken.User, created bool, err error) {
	if !authtoken.ValidUsername(name) {
		return u, false, fmt.Errorf("invalid username %q", name)
	}
	var id int64
	err = s.DB.GetContext(ctx, &id,
		`INSERT INTO users (username, is_service) VALUES ($1, $2) ON CONFLICT (username) DO NOTHING RETURNING id`, name, service)
	switch {
	case err == nil:
		created = true
	case errors.Is(err, sql.ErrNoRows):
	default:
		return u, false, err
	}
	u, err = s.ByUsername(ctx, name)
	return u, created, err
}

// UpsertOIDC records a login from the identity provider: the user is found by (issuer, subject),
// or by username for an account created before its first login, and its profile refreshed.
func (s *Users) UpsertOIDC(ctx context.Context, issuer, subject, username, email, displayName string) (authtoken.User, bool, error) {
	var row struct {
		userRow
		Created bool `db:"created"`
	}
	err := s.DB.GetContext(ctx, &row, `
		INSERT INTO users (username, email, display_name, oidc_issuer, oidc_subject, last_login_at)
		VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4, $5, now())
		ON CONFLICT (username) DO UPDATE SET
			email = COALESCE(EXCLUDED.email, users.email),
			display_name = COALESCE(EXCLUDED.display_name, users.display_name),
			oidc_issuer = EXCLUDED.oidc_issuer,
			oidc_subject = EXCLUDED.oidc_subject,
			last_login_at = now()
		WHERE users.oidc_subject IS NULL OR (users.oidc_issuer = EXCLUDED.oidc_issuer AND users.oidc_subject = EXCLUDED.oidc_subject)
		RETURNING `+userColumns+`, (xmax = 0) AS created`, username, email, displayName, issuer, subject)
	if errors.Is(err, sql.ErrNoRows) {
		return authtoken.User{}, false, fmt.Errorf("%w: %q", authtoken.ErrIdentityConflict, username)
	}
	if err != nil {
		return authtoken.User{}, false, err
	}
	return row.user(), row.Created, nil
}

// GrantRoles gives a user roles (idempotent), recording who granted them.
func (s *Users) GrantRoles(ctx context.Context, userID int64, roles []string, by string) error {
	_, err := s.DB.ExecContext(ctx, `
		INSERT INTO user_roles (user_id, role, granted_by)
		SELECT $1, unnest($2::text[]), $3
		ON CONFLICT (user_id, role) DO NOTHING`, userID, pq.Array(roles), by)
	return err
}
