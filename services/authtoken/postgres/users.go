// Package postgres stores the authtoken service's users, roles and API tokens in PostgreSQL.
package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// Users reads and writes users and their roles.
type Users struct {
	// DB answers reads (at a secondary site the local replica).
	DB *sqlx.DB
	// Write, when set, takes every statement that changes rows: the main site's primary
	// (database.Pools.Write). Unset: DB.
	Write *sqlx.DB
	// Secondary: a secondary site, which changes no row at the main (decisions §45): a login only
	// reads the account linked to its identity (UpsertOIDC).
	Secondary bool
}

// writer is the pool for changes (see Write).
func (s *Users) writer() *sqlx.DB {
	if s.Write != nil {
		return s.Write
	}
	return s.DB
}

// userColumns read a user row and, in the same query, the user's roles (sorted).
const userColumns = `id, username, COALESCE(email, '') AS email, COALESCE(display_name, '') AS display_name,
	is_service, is_active, created_at, last_login_at, sessions_valid_after,
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
	return s.one(ctx, s.DB, `SELECT `+userColumns+` FROM users WHERE id = $1`, id)
}

// ByUsername returns the user called name and their roles.
func (s *Users) ByUsername(ctx context.Context, name string) (authtoken.User, error) {
	return s.one(ctx, s.DB, `SELECT `+userColumns+` FROM users WHERE username = $1`, name)
}

func (s *Users) one(ctx context.Context, db *sqlx.DB, query string, arg any) (authtoken.User, error) {
	var r userRow
	if err := db.GetContext(ctx, &r, query, arg); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, problem.ErrNotFound
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
	err = s.writer().GetContext(ctx, &id,
		`INSERT INTO users (username, is_service) VALUES ($1, $2) ON CONFLICT (username) DO NOTHING RETURNING id`, name, service)
	switch {
	case err == nil:
		created = true
	case errors.Is(err, sql.ErrNoRows):
	default:
		return u, false, err
	}
	// Read back where it was written: a secondary site's replica may not have the row yet.
	u, err = s.one(ctx, s.writer(), `SELECT `+userColumns+` FROM users WHERE username = $1`, name)
	return u, created, err
}

// maxUsernameTries bounds the usernames tried for a first login whose username is taken: the
// claimed one, then name-2 … name-20.
const maxUsernameTries = 20

// UpsertOIDC records a login from the identity provider. The account is the one linked to the
// identity (issuer, subject) — never one found by username — and its profile is refreshed. A first
// login creates an account: under the username the provider gave when it is free, else under the
// first free one of name-2, name-3, … (an existing account is linked to an identity only by an
// admin: LinkIdentity). created tells which happened.
//
// At a secondary site (Secondary) it only reads: the account linked to the identity, in the replica,
// unchanged (no profile refresh, no last_login_at); none is authtoken.ErrFirstLoginAtMain.
func (s *Users) UpsertOIDC(ctx context.Context, issuer, subject, username, email, displayName string) (authtoken.User, bool, error) {
	if s.Secondary {
		var r userRow
		err := s.DB.GetContext(ctx, &r, `SELECT `+userColumns+` FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2`, issuer, subject)
		if errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, false, authtoken.ErrFirstLoginAtMain
		}
		return r.user(), false, err
	}
	for try := range maxUsernameTries {
		var r userRow
		err := s.writer().GetContext(ctx, &r, `
			UPDATE users SET
				email = COALESCE(NULLIF($3, ''), email),
				display_name = COALESCE(NULLIF($4, ''), display_name),
				last_login_at = now()
			WHERE oidc_issuer = $1 AND oidc_subject = $2
			RETURNING `+userColumns, issuer, subject, email, displayName)
		if err == nil {
			return r.user(), false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, false, err
		}
		// No account has this identity: create one. ON CONFLICT DO NOTHING covers both the
		// username being taken (try the next one) and a concurrent first login of the same
		// identity (the UPDATE above finds its account on the next round).
		err = s.writer().GetContext(ctx, &r, `
			INSERT INTO users (username, email, display_name, oidc_issuer, oidc_subject, last_login_at)
			VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4, $5, now())
			ON CONFLICT DO NOTHING
			RETURNING `+userColumns, authtoken.NumberedUsername(username, try+1), email, displayName, issuer, subject)
		if err == nil {
			return r.user(), true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, false, err
		}
	}
	return authtoken.User{}, false, fmt.Errorf("%w: %q and %d numbered variants are taken", authtoken.ErrIdentityConflict, username, maxUsernameTries-1)
}

// LinkIdentity links user id to the identity-provider account (issuer, subject), replacing any
// identity it had, with an audit row (action link_identity) in the same transaction. A service
// account cannot be linked (authtoken.ErrServiceAccountLogin); an identity already linked to
// another account is refused (authtoken.ErrIdentityConflict) unless move is set, which takes it
// off that account (audited there as well).
func (s *Users) LinkIdentity(ctx context.Context, id int64, issuer, subject string, move bool, a authtoken.Audit) (authtoken.User, error) {
	tx, err := s.writer().BeginTxx(ctx, nil)
	if err != nil {
		return authtoken.User{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var before struct {
		IsService bool           `db:"is_service"`
		Issuer    sql.NullString `db:"oidc_issuer"`
		Subject   sql.NullString `db:"oidc_subject"`
	}
	if err := tx.GetContext(ctx, &before, `SELECT is_service, oidc_issuer, oidc_subject FROM users WHERE id = $1 FOR UPDATE`, id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, problem.ErrNotFound
		}
		return authtoken.User{}, err
	}
	if before.IsService {
		return authtoken.User{}, authtoken.ErrServiceAccountLogin
	}
	audit := func(userID int64, detail map[string]any) error {
		b, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO user_audit (actor_user_id, actor, user_id, action, detail) VALUES ($1, $2, $3, $4, $5)`,
			actorID(a.Actor), a.Actor.Name, userID, authtoken.AuditLinkIdentity, b)
		return err
	}
	var holder struct {
		ID       int64  `db:"id"`
		Username string `db:"username"`
	}
	err = tx.GetContext(ctx, &holder, `SELECT id, username FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2 AND id <> $3 FOR UPDATE`, issuer, subject, id)
	switch {
	case err == nil && !move:
		return authtoken.User{}, fmt.Errorf("%w: the identity is linked to user %q (id %d); move it with move: true", authtoken.ErrIdentityConflict, holder.Username, holder.ID)
	case err == nil: // moved off the account that had it, audited there too
		if _, err := tx.ExecContext(ctx, `UPDATE users SET oidc_issuer = NULL, oidc_subject = NULL WHERE id = $1`, holder.ID); err != nil {
			return authtoken.User{}, err
		}
		if err := audit(holder.ID, map[string]any{"issuer": nil, "subject": nil, "previous_issuer": issuer, "previous_subject": subject, "moved_to_user_id": id}); err != nil {
			return authtoken.User{}, err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return authtoken.User{}, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET oidc_issuer = $2, oidc_subject = $3 WHERE id = $1`, id, issuer, subject); err != nil {
		return authtoken.User{}, err
	}
	if err := audit(id, map[string]any{"issuer": issuer, "subject": subject,
		"previous_issuer": nullable(before.Issuer), "previous_subject": nullable(before.Subject)}); err != nil {
		return authtoken.User{}, err
	}
	u, err := s.one(ctx, s.writer(), `SELECT `+userColumns+` FROM users WHERE id = $1`, id)
	if err != nil {
		return authtoken.User{}, err
	}
	return u, tx.Commit()
}

// actorID is the audit row's actor_user_id: the acting user, or NULL for the command line and
// logins.
func actorID(c authtoken.Caller) *int64 {
	if c.UserID > 0 {
		return &c.UserID
	}
	return nil
}

// nullable is s's value, or nil when it is NULL.
func nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

// GrantRoles gives a user roles (idempotent), recording who granted them; the roles actually
// added are audited (action grant_roles, actor by) in the same statement.
func (s *Users) GrantRoles(ctx context.Context, userID int64, roles []string, by string) error {
	_, err := s.writer().ExecContext(ctx, `
		WITH added AS (
			INSERT INTO user_roles (user_id, role, granted_by)
			SELECT $1, unnest($2::text[]), $3
			ON CONFLICT (user_id, role) DO NOTHING
			RETURNING role)
		INSERT INTO user_audit (actor, user_id, action, detail)
		SELECT $3, $1, 'grant_roles', jsonb_build_object('added', jsonb_agg(role ORDER BY role)) FROM added
		HAVING count(*) > 0`, userID, pq.Array(roles), by)
	return err
}

// likePattern matches s anywhere, with LIKE's wildcards in s taken literally (ESCAPE '\').
func likePattern(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(s) + "%"
}

// userFilter is the WHERE clause of List: $1 pattern or ”, $2 role or ”, $3 active or NULL.
const userFilter = ` WHERE ($1 = '' OR username ILIKE $1 ESCAPE '\' OR email ILIKE $1 ESCAPE '\' OR display_name ILIKE $1 ESCAPE '\')
	AND ($2 = '' OR EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = users.id AND r.role = $2))
	AND ($3::boolean IS NULL OR is_active = $3)`

// List returns a page of users matching q, by id, and how many match in all.
func (s *Users) List(ctx context.Context, q authtoken.UserListQuery) ([]authtoken.User, int64, error) {
	pattern := ""
	if q.Q != "" {
		pattern = likePattern(q.Q)
	}
	var total int64
	if err := s.DB.GetContext(ctx, &total, `SELECT count(*) FROM users`+userFilter, pattern, q.Role, q.Active); err != nil {
		return nil, 0, err
	}
	var rows []userRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+userColumns+` FROM users`+userFilter+` ORDER BY id LIMIT $4 OFFSET $5`,
		pattern, q.Role, q.Active, q.Limit, q.Offset); err != nil {
		return nil, 0, err
	}
	out := make([]authtoken.User, len(rows))
	for i, r := range rows {
		out[i] = r.user()
	}
	return out, total, nil
}

// adminLock serialises changes that may remove an active admin, so two admins disabling
// each other at once cannot both pass the last-admin check.
const adminLock = 0x6f70737573657273 // "opsusers"

// Update applies ch to user id in one transaction with its audit rows (see
// authtoken.UserStore).
func (s *Users) Update(ctx context.Context, id int64, ch authtoken.UserChanges, a authtoken.Audit) (authtoken.User, error) {
	tx, err := s.writer().BeginTxx(ctx, nil)
	if err != nil {
		return authtoken.User{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, adminLock); err != nil {
		return authtoken.User{}, err
	}
	var before userRow
	if err := tx.GetContext(ctx, &before, `SELECT `+userColumns+` FROM users WHERE id = $1 FOR UPDATE`, id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return authtoken.User{}, problem.ErrNotFound
		}
		return authtoken.User{}, err
	}
	old := before.user()
	roles, active := old.Roles, old.IsActive
	if ch.Roles != nil {
		roles = *ch.Roles
	}
	if ch.Active != nil {
		active = *ch.Active
	}
	wasAdmin := old.IsActive && slices.Contains(old.Roles, authn.RoleAdmin)
	if wasAdmin && !(active && slices.Contains(roles, authn.RoleAdmin)) {
		var others int64
		if err := tx.GetContext(ctx, &others, `SELECT count(*) FROM users u JOIN user_roles r ON r.user_id = u.id AND r.role = 'admin'
			WHERE u.is_active AND u.id <> $1`, id); err != nil {
			return authtoken.User{}, err
		}
		if others == 0 {
			return authtoken.User{}, authtoken.ErrLastAdmin
		}
	}
	audit := func(action string, detail map[string]any) error {
		b, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO user_audit (actor_user_id, actor, user_id, action, detail) VALUES ($1, $2, $3, $4, $5)`,
			actorID(a.Actor), a.Actor.Name, id, action, b)
		return err
	}
	if !slices.Equal(roles, old.Roles) {
		if _, err := tx.ExecContext(ctx, `DELETE FROM user_roles WHERE user_id = $1 AND NOT (role = ANY($2::text[]))`, id, pq.Array(roles)); err != nil {
			return authtoken.User{}, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO user_roles (user_id, role, granted_by) SELECT $1, unnest($2::text[]), $3
			ON CONFLICT (user_id, role) DO NOTHING`, id, pq.Array(roles), a.Actor.Name); err != nil {
			return authtoken.User{}, err
		}
		if err := audit(authtoken.AuditSetRoles, map[string]any{"before": old.Roles, "after": roles}); err != nil {
			return authtoken.User{}, err
		}
	}
	if active != old.IsActive {
		if _, err := tx.ExecContext(ctx, `UPDATE users SET is_active = $2,
			sessions_valid_after = CASE WHEN $2 THEN sessions_valid_after ELSE now() END WHERE id = $1`, id, active); err != nil {
			return authtoken.User{}, err
		}
		action := authtoken.AuditDisable
		if active {
			action = authtoken.AuditEnable
		}
		if err := audit(action, map[string]any{"username": old.Username}); err != nil {
			return authtoken.User{}, err
		}
	}
	var after userRow
	if err := tx.GetContext(ctx, &after, `SELECT `+userColumns+` FROM users WHERE id = $1`, id); err != nil {
		return authtoken.User{}, err
	}
	if err := tx.Commit(); err != nil {
		return authtoken.User{}, err
	}
	return after.user(), nil
}

// AuditLog implements authtoken.UserStore.
func (s *Users) AuditLog(ctx context.Context, q authtoken.UserAuditQuery) ([]authtoken.UserAuditEntry, int64, error) {
	const filter = ` WHERE ($1::bigint = 0 OR user_id = $1::bigint)`
	var total int64
	if err := s.DB.GetContext(ctx, &total, `SELECT count(*) FROM user_audit`+filter, q.UserID); err != nil {
		return nil, 0, err
	}
	var rows []struct {
		ID          int64     `db:"id"`
		At          time.Time `db:"at"`
		ActorUserID *int64    `db:"actor_user_id"`
		Actor       string    `db:"actor"`
		UserID      int64     `db:"user_id"`
		Action      string    `db:"action"`
		Detail      []byte    `db:"detail"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `SELECT id, at, actor_user_id, actor, user_id, action, detail FROM user_audit`+filter+
		` ORDER BY id DESC LIMIT $2 OFFSET $3`, q.UserID, q.Limit, q.Offset); err != nil {
		return nil, 0, err
	}
	items := make([]authtoken.UserAuditEntry, len(rows))
	for i, r := range rows {
		items[i] = authtoken.UserAuditEntry{ID: r.ID, At: r.At.UTC(), ActorUserID: r.ActorUserID, Actor: r.Actor, UserID: r.UserID, Action: r.Action}
		if err := json.Unmarshal(r.Detail, &items[i].Detail); err != nil {
			return nil, 0, fmt.Errorf("user audit row %d: %w", r.ID, err)
		}
	}
	return items, total, nil
}

// directoryLock serialises publishing the user directory (see Directory).
const directoryLock = 0x6f70736469726563 // "opsdirec"

// Directory reads every user as the user directory holds them and hands them to publish,
// holding a lock until publish returns: concurrent publishers (authtoken replicas, the admin
// command) thus write in the order they read, and a snapshot read before a change can never
// overwrite one read after it. sessions_valid_after is rounded up to whole seconds, since JWTs
// carry iat in whole seconds (a JWT issued in the same second as the revocation is refused too).
func (s *Users) Directory(ctx context.Context, publish func([]authn.DirectoryEntry) error) error {
	return database.InReadTx(ctx, s.DB, func(tx *sqlx.Tx) error { // read only: it may be a replica
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, directoryLock); err != nil {
			return err
		}
		var rows []struct {
			ID         int64          `db:"id"`
			Username   string         `db:"username"`
			Active     bool           `db:"is_active"`
			ValidAfter int64          `db:"valid_after"`
			Roles      pq.StringArray `db:"roles"`
		}
		if err := tx.SelectContext(ctx, &rows, `SELECT id, username, is_active,
			COALESCE(ceil(extract(epoch FROM sessions_valid_after))::bigint, 0) AS valid_after,
			ARRAY(SELECT role FROM user_roles WHERE user_id = users.id ORDER BY role) AS roles
			FROM users ORDER BY id`); err != nil {
			return err
		}
		out := make([]authn.DirectoryEntry, len(rows))
		for i, r := range rows {
			out[i] = authn.DirectoryEntry{UserID: r.ID, Username: r.Username, Active: r.Active, ValidAfter: r.ValidAfter, Roles: []string(r.Roles)}
		}
		return publish(out)
	})
}
