package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// Tokens stores API tokens, their audit log and their applied usage flushes. It implements
// authtoken.TokenStore and authtoken.UsageSink. Every change is one transaction that writes its
// audit row(s) too; the token hash is written once and never read back out.
type Tokens struct {
	// DB answers reads, verification included: at a secondary site the local replica, so
	// tokens keep verifying while the WAN to the main site is down.
	DB *sqlx.DB
	// Write, when set, takes every statement that changes rows: the main site's primary
	// (database.Pools.Write). Unset: DB.
	Write *sqlx.DB

	// The hot-path statements, prepared on first use: parsing and planning the verification
	// query on every call costs several times more than running it.
	verifyStmt    atomic.Pointer[sqlx.Stmt]
	recordUseStmt atomic.Pointer[sqlx.Stmt]
}

// prepared returns the statement cached in slot, preparing query on first use (a failed
// prepare, e.g. while the database is down, is retried on the next call).
func (s *Tokens) prepared(ctx context.Context, slot *atomic.Pointer[sqlx.Stmt], query string) (*sqlx.Stmt, error) {
	if st := slot.Load(); st != nil {
		return st, nil
	}
	db := s.DB
	if slot == &s.recordUseStmt {
		db = s.writer()
	}
	st, err := db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if !slot.CompareAndSwap(nil, st) {
		_ = st.Close()
	}
	return slot.Load(), nil
}

// writer is the pool for changes (see Write).
func (s *Tokens) writer() *sqlx.DB {
	if s.Write != nil {
		return s.Write
	}
	return s.DB
}

// tokenColumns are the columns of authtoken.Token; is_expired is judged by the database clock,
// the same clock verification uses.
const tokenColumns = `id, user_id, name, prefix, scopes, created_at, expires_at, last_used_at, last_used_ip,
	usage_count, is_active, (expires_at IS NOT NULL AND expires_at <= now()) AS is_expired, revoked_at, replaced_by`

// visibleAt is the SQL form of authtoken.Visibility on parameters $n (all users) and $n+1
// (user id); most queries have the token id in $1 and use visibleAt(2).
func visibleAt(n int) string {
	return fmt.Sprintf("($%d::boolean OR user_id = $%d::bigint)", n, n+1)
}

type tokenRow struct {
	ID         int64          `db:"id"`
	UserID     int64          `db:"user_id"`
	Name       string         `db:"name"`
	Prefix     string         `db:"prefix"`
	Scopes     pq.StringArray `db:"scopes"`
	CreatedAt  time.Time      `db:"created_at"`
	ExpiresAt  *time.Time     `db:"expires_at"`
	LastUsedAt *time.Time     `db:"last_used_at"`
	LastUsedIP *string        `db:"last_used_ip"`
	UsageCount int64          `db:"usage_count"`
	IsActive   bool           `db:"is_active"`
	IsExpired  bool           `db:"is_expired"`
	RevokedAt  *time.Time     `db:"revoked_at"`
	ReplacedBy *int64         `db:"replaced_by"`
}

func (r tokenRow) token() authtoken.Token {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	scopes := []string(r.Scopes)
	if scopes == nil {
		scopes = []string{}
	}
	return authtoken.Token{
		ID: r.ID, UserID: r.UserID, Name: r.Name, Prefix: r.Prefix, Scopes: scopes,
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: utc(r.ExpiresAt), LastUsedAt: utc(r.LastUsedAt), LastUsedIP: r.LastUsedIP,
		UsageCount: r.UsageCount, IsActive: r.IsActive, IsExpired: r.IsExpired, RevokedAt: utc(r.RevokedAt), ReplacedBy: r.ReplacedBy,
	}
}

// lockToken reads a token the visibility allows, locked for the rest of the transaction.
func lockToken(ctx context.Context, tx *sqlx.Tx, id int64, v authtoken.Visibility) (authtoken.Token, error) {
	var r tokenRow
	err := tx.GetContext(ctx, &r, `SELECT `+tokenColumns+` FROM api_tokens WHERE id = $1 AND `+visibleAt(2)+` FOR UPDATE`,
		id, v.AllUsers, v.UserID)
	if errors.Is(err, sql.ErrNoRows) {
		return authtoken.Token{}, problem.ErrNotFound
	}
	return r.token(), err
}

// tokenFacts are the non-secret facts of a token an audit row records.
func tokenFacts(t authtoken.Token) map[string]any {
	return map[string]any{"user_id": t.UserID, "name": t.Name, "prefix": t.Prefix, "scopes": t.Scopes, "expires_at": t.ExpiresAt}
}

// audit writes one audit row per token id, with the facts of a's Detail plus extra.
func audit(ctx context.Context, tx *sqlx.Tx, a authtoken.Audit, tokenIDs []int64, extra map[string]any) error {
	detail := map[string]any{}
	for k, v := range extra {
		detail[k] = v
	}
	for k, v := range a.Detail {
		detail[k] = v
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO token_audit (actor_user_id, actor, token_id, action, detail)
		SELECT $1, $2, unnest($3::bigint[]), $4, $5::jsonb`,
		actorID(a.Actor), a.Actor.Name, pq.Array(tokenIDs), a.Action, string(b))
	return err
}

// Create implements authtoken.TokenStore. The owner's row is locked so that concurrent creates
// cannot both pass the per-user limit.
func (s *Tokens) Create(ctx context.Context, rec authtoken.TokenRecord, maxActive int, a authtoken.Audit) (authtoken.Token, error) {
	var tok authtoken.Token
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		var active bool
		err := tx.GetContext(ctx, &active, `SELECT is_active FROM users WHERE id = $1 FOR NO KEY UPDATE`, rec.UserID)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !active) {
			return authtoken.ErrAccountInactive
		}
		if err != nil {
			return err
		}
		var held int
		if err := tx.GetContext(ctx, &held, `
			SELECT count(*) FROM api_tokens
			WHERE user_id = $1 AND is_active AND (expires_at IS NULL OR expires_at > now())`, rec.UserID); err != nil {
			return err
		}
		if held >= maxActive {
			return fmt.Errorf("%w: %d active tokens (revoke some first)", authtoken.ErrTokenLimit, held)
		}
		var r tokenRow
		if err := tx.GetContext(ctx, &r, `
			INSERT INTO api_tokens (user_id, name, token_hash, prefix, scopes, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(days => $6))
			RETURNING `+tokenColumns,
			rec.UserID, rec.Name, rec.Hash, rec.Prefix, pq.Array(rec.Scopes), rec.LifetimeDays); err != nil {
			return err
		}
		tok = r.token()
		return audit(ctx, tx, a, []int64{tok.ID}, tokenFacts(tok))
	})
	return tok, err
}

// Get implements authtoken.TokenStore.
func (s *Tokens) Get(ctx context.Context, id int64, v authtoken.Visibility) (authtoken.Token, error) {
	var r tokenRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+tokenColumns+` FROM api_tokens WHERE id = $1 AND `+visibleAt(2), id, v.AllUsers, v.UserID)
	if errors.Is(err, sql.ErrNoRows) {
		return authtoken.Token{}, problem.ErrNotFound
	}
	return r.token(), err
}

// List implements authtoken.TokenStore: newest first.
func (s *Tokens) List(ctx context.Context, v authtoken.Visibility, limit, offset int) ([]authtoken.Token, int64, error) {
	var total int64
	if err := s.DB.GetContext(ctx, &total, `SELECT count(*) FROM api_tokens WHERE `+visibleAt(1), v.AllUsers, v.UserID); err != nil {
		return nil, 0, err
	}
	var rows []tokenRow
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+tokenColumns+` FROM api_tokens WHERE `+visibleAt(1)+`
		ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4`, v.AllUsers, v.UserID, limit, offset); err != nil {
		return nil, 0, err
	}
	items := make([]authtoken.Token, len(rows))
	for i, r := range rows {
		items[i] = r.token()
	}
	return items, total, nil
}

// Update implements authtoken.TokenStore; the audit row holds the changed fields before and after.
func (s *Tokens) Update(ctx context.Context, id int64, v authtoken.Visibility, ch authtoken.TokenChanges, a authtoken.Audit) (authtoken.Token, error) {
	var tok authtoken.Token
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		before, err := lockToken(ctx, tx, id, v)
		if err != nil {
			return err
		}
		if !before.IsActive {
			return authtoken.ErrTokenRevoked
		}
		var scopes any // NULL keeps the scopes
		if ch.Scopes != nil {
			scopes = pq.Array(*ch.Scopes)
		}
		var r tokenRow
		if err := tx.GetContext(ctx, &r, `
			UPDATE api_tokens SET
				name = COALESCE($2, name),
				scopes = COALESCE($3::text[], scopes),
				expires_at = CASE WHEN $4::integer IS NULL THEN expires_at ELSE now() + make_interval(days => $4::integer) END
			WHERE id = $1
			RETURNING `+tokenColumns, id, ch.Name, scopes, ch.ExpiresInDays); err != nil {
			return err
		}
		tok = r.token()
		was, now := map[string]any{}, map[string]any{}
		if ch.Name != nil {
			was["name"], now["name"] = before.Name, tok.Name
		}
		if ch.Scopes != nil {
			was["scopes"], now["scopes"] = before.Scopes, tok.Scopes
		}
		if ch.ExpiresInDays != nil {
			was["expires_at"], now["expires_at"] = before.ExpiresAt, tok.ExpiresAt
		}
		return audit(ctx, tx, a, []int64{id}, map[string]any{"user_id": tok.UserID, "before": was, "after": now})
	})
	return tok, err
}

// Regenerate implements authtoken.TokenStore: the new token gets the old one's name, scopes and
// lifetime length (at most MaxTokenDays) from now; the old one is revoked and points to it.
// Both tokens get an audit row: regenerate (old, replaced_by) and create (new, replaces).
func (s *Tokens) Regenerate(ctx context.Context, id int64, v authtoken.Visibility, next authtoken.TokenRecord, defaultDays int, a authtoken.Audit) (authtoken.Token, error) {
	var tok authtoken.Token
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		old, err := lockToken(ctx, tx, id, v)
		if err != nil {
			return err
		}
		if !old.IsActive {
			return authtoken.ErrTokenRevoked
		}
		var r tokenRow
		if err := tx.GetContext(ctx, &r, `
			INSERT INTO api_tokens (user_id, name, token_hash, prefix, scopes, expires_at)
			SELECT user_id, name, $2, $3, scopes, now() + LEAST(GREATEST(
				COALESCE(expires_at - created_at, make_interval(days => $4)), interval '1 day'), make_interval(days => $5))
			FROM api_tokens WHERE id = $1
			RETURNING `+tokenColumns, id, next.Hash, next.Prefix, defaultDays, authtoken.MaxTokenDays); err != nil {
			return err
		}
		tok = r.token()
		if _, err := tx.ExecContext(ctx, `
			UPDATE api_tokens SET is_active = false, revoked_at = now(), replaced_by = $2 WHERE id = $1`, id, tok.ID); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, []int64{id}, map[string]any{"user_id": old.UserID, "name": old.Name, "prefix": old.Prefix, "replaced_by": tok.ID}); err != nil {
			return err
		}
		created := authtoken.Audit{Actor: a.Actor, Action: authtoken.AuditCreate}
		facts := tokenFacts(tok)
		facts["replaces"] = id
		return audit(ctx, tx, created, []int64{tok.ID}, facts)
	})
	return tok, err
}

// Revoke implements authtoken.TokenStore; revoking a revoked token changes nothing and writes
// no audit row.
func (s *Tokens) Revoke(ctx context.Context, id int64, v authtoken.Visibility, a authtoken.Audit) (authtoken.Token, error) {
	var tok authtoken.Token
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		var err error
		if tok, err = lockToken(ctx, tx, id, v); err != nil || !tok.IsActive {
			return err
		}
		var r tokenRow
		if err := tx.GetContext(ctx, &r, `
			UPDATE api_tokens SET is_active = false, revoked_at = now() WHERE id = $1
			RETURNING `+tokenColumns, id); err != nil {
			return err
		}
		tok = r.token()
		return audit(ctx, tx, a, []int64{id}, map[string]any{"user_id": tok.UserID, "name": tok.Name, "prefix": tok.Prefix})
	})
	return tok, err
}

// BulkRevoke implements authtoken.TokenStore. Rows are locked in id order, the order the usage
// flush locks them in, so the two cannot deadlock.
func (s *Tokens) BulkRevoke(ctx context.Context, ids []int64, v authtoken.Visibility, a authtoken.Audit) ([]authtoken.BulkRevokeResult, error) {
	results := make([]authtoken.BulkRevokeResult, len(ids))
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		var found []struct {
			ID       int64 `db:"id"`
			IsActive bool  `db:"is_active"`
		}
		if err := tx.SelectContext(ctx, &found, `
			SELECT id, is_active FROM api_tokens WHERE id = ANY($1) AND `+visibleAt(2)+`
			ORDER BY id FOR UPDATE`, pq.Array(ids), v.AllUsers, v.UserID); err != nil {
			return err
		}
		status := map[int64]string{}
		var revoke []int64
		for _, f := range found {
			status[f.ID] = authtoken.BulkAlreadyRevoked
			if f.IsActive {
				status[f.ID] = authtoken.BulkRevoked
				revoke = append(revoke, f.ID)
			}
		}
		for i, id := range ids {
			results[i] = authtoken.BulkRevokeResult{TokenID: id, Status: authtoken.BulkNotFound}
			if st, ok := status[id]; ok {
				results[i].Status = st
			}
		}
		if len(revoke) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET is_active = false, revoked_at = now() WHERE id = ANY($1)`,
			pq.Array(revoke)); err != nil {
			return err
		}
		return audit(ctx, tx, a, revoke, nil)
	})
	return results, err
}

// AuditLog implements authtoken.TokenStore: newest first.
func (s *Tokens) AuditLog(ctx context.Context, q authtoken.AuditQuery) ([]authtoken.AuditEntry, int64, error) {
	var total int64
	if err := s.DB.GetContext(ctx, &total, `SELECT count(*) FROM token_audit WHERE ($1::bigint = 0 OR token_id = $1::bigint)`, q.TokenID); err != nil {
		return nil, 0, err
	}
	var rows []struct {
		ID          int64     `db:"id"`
		At          time.Time `db:"at"`
		ActorUserID *int64    `db:"actor_user_id"`
		Actor       string    `db:"actor"`
		TokenID     *int64    `db:"token_id"`
		Action      string    `db:"action"`
		Detail      []byte    `db:"detail"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT id, at, actor_user_id, actor, token_id, action, detail FROM token_audit
		WHERE ($1::bigint = 0 OR token_id = $1::bigint) ORDER BY id DESC LIMIT $2 OFFSET $3`, q.TokenID, q.Limit, q.Offset); err != nil {
		return nil, 0, err
	}
	items := make([]authtoken.AuditEntry, len(rows))
	for i, r := range rows {
		items[i] = authtoken.AuditEntry{ID: r.ID, At: r.At.UTC(), ActorUserID: r.ActorUserID, Actor: r.Actor, TokenID: r.TokenID, Action: r.Action}
		if err := json.Unmarshal(r.Detail, &items[i].Detail); err != nil {
			return nil, 0, fmt.Errorf("audit row %d: %w", r.ID, err)
		}
	}
	return items, total, nil
}

// verifyQuery finds a verifiable token by hash: one lookup on the unique index, with the
// owner's active flag and roles and, for a service account, its kind and bindings (an
// instrument's whole instruments expanded to their modules), so that what ingest and transfer
// check ownership against travels with the verified token.
const verifyQuery = `
	SELECT t.id, t.user_id, u.username, t.scopes, t.expires_at, u.is_service, u.service_kind,
		ARRAY(SELECT role FROM user_roles WHERE user_id = t.user_id ORDER BY role) AS roles,
		CASE WHEN u.is_service THEN ARRAY(SELECT b.instrument_id FROM service_bindings b
			WHERE b.user_id = t.user_id AND b.instrument_id IS NOT NULL ORDER BY 1) END AS instruments,
		CASE WHEN u.is_service THEN ARRAY(SELECT DISTINCT m.id FROM service_bindings b JOIN instrument_modules m
			ON m.id = b.instrument_module_id OR m.instrument_id = b.instrument_id
			WHERE b.user_id = t.user_id ORDER BY 1) END AS modules,
		CASE WHEN u.is_service THEN ARRAY(SELECT b.location_id FROM service_bindings b
			WHERE b.user_id = t.user_id AND b.location_id IS NOT NULL ORDER BY 1) END AS locations
	FROM api_tokens t JOIN users u ON u.id = t.user_id
	WHERE t.token_hash = $1 AND t.is_active AND u.is_active AND (t.expires_at IS NULL OR t.expires_at > now())`

// Verify implements authtoken.TokenStore.
func (s *Tokens) Verify(ctx context.Context, hash string) (authtoken.VerifiedToken, error) {
	st, err := s.prepared(ctx, &s.verifyStmt, verifyQuery)
	if err != nil {
		return authtoken.VerifiedToken{}, err
	}
	var r struct {
		TokenID   int64          `db:"id"`
		UserID    int64          `db:"user_id"`
		Username  string         `db:"username"`
		Scopes    pq.StringArray `db:"scopes"`
		ExpiresAt *time.Time     `db:"expires_at"`
		Roles     pq.StringArray `db:"roles"`
		IsService bool           `db:"is_service"`
		Kind      sql.NullString `db:"service_kind"`
		Instr     pq.Int64Array  `db:"instruments"`
		Modules   pq.Int64Array  `db:"modules"`
		Locations pq.Int64Array  `db:"locations"`
	}
	err = st.GetContext(ctx, &r, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return authtoken.VerifiedToken{}, problem.ErrNotFound
	}
	if err != nil {
		return authtoken.VerifiedToken{}, err
	}
	v := authtoken.VerifiedToken{TokenID: r.TokenID, UserID: r.UserID, Username: r.Username, Scopes: r.Scopes, Roles: r.Roles}
	if r.ExpiresAt != nil {
		exp := r.ExpiresAt.UTC()
		v.ExpiresAt = &exp
	}
	if v.Scopes == nil {
		v.Scopes = []string{}
	}
	if v.Roles == nil {
		v.Roles = []string{}
	}
	if r.IsService {
		v.Service = &authn.ServiceBinding{Kind: r.Kind.String, Instruments: nilIfEmpty(r.Instr), Modules: nilIfEmpty(r.Modules), Locations: nilIfEmpty(r.Locations)}
	}
	return v, nil
}

// lastUsedSet sets last_used_at and last_used_ip from the columns at (timestamptz) and ip
// (text) of a use, unless the row already records a later use; an empty ip keeps the address.
const lastUsedSet = `
	last_used_at = GREATEST(last_used_at, %[1]s),
	last_used_ip = CASE WHEN last_used_at IS NULL OR %[1]s >= last_used_at
		THEN COALESCE(NULLIF(%[2]s, ''), last_used_ip) ELSE last_used_ip END`

// recordUseQuery counts one use of token $1 at $2 from address $3.
var recordUseQuery = `UPDATE api_tokens SET usage_count = usage_count + 1, ` +
	fmt.Sprintf(lastUsedSet, "$2::timestamptz", "$3::text") + ` WHERE id = $1`

// RecordUse implements authtoken.TokenStore: one use, straight into the row.
func (s *Tokens) RecordUse(ctx context.Context, tokenID int64, at time.Time, ip string) error {
	st, err := s.prepared(ctx, &s.recordUseStmt, recordUseQuery)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, tokenID, at, ip)
	return err
}

// ApplyUsage implements authtoken.UsageSink: records flushID and adds every delta in ONE
// statement, in one transaction, so a flush is applied exactly once however often it is
// replayed. Rows are locked in id order first, so concurrent flushes cannot deadlock.
func (s *Tokens) ApplyUsage(ctx context.Context, flushID string, deltas []authtoken.UsageDelta) (bool, error) {
	ids := make([]int64, len(deltas))
	counts := make([]int64, len(deltas))
	atMicros := make([]int64, len(deltas))
	ips := make([]string, len(deltas))
	var uses int64
	for i, d := range deltas {
		ids[i], counts[i], atMicros[i], ips[i] = d.TokenID, d.Count, d.LastUsedAt.UnixMicro(), d.LastUsedIP
		uses += d.Count
	}
	applied := false
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `
			INSERT INTO token_usage_flushes (flush_id, tokens, uses) VALUES ($1, $2, $3)
			ON CONFLICT (flush_id) DO NOTHING`, flushID, len(deltas), uses)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // applied before: change nothing
		}
		applied = true
		if len(deltas) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM api_tokens WHERE id = ANY($1) ORDER BY id FOR UPDATE`, pq.Array(ids)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE api_tokens SET usage_count = usage_count + v.n, `+fmt.Sprintf(lastUsedSet, "v.at", "v.ip")+`
			FROM (
				SELECT id, n, timestamptz 'epoch' + at_us * interval '1 microsecond' AS at, ip
				FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[]) AS u(id, n, at_us, ip)
			) AS v
			WHERE api_tokens.id = v.id`, pq.Array(ids), pq.Array(counts), pq.Array(atMicros), pq.Array(ips))
		return err
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// PruneUsageFlushes implements authtoken.UsageSink.
func (s *Tokens) PruneUsageFlushes(ctx context.Context, before time.Time, keep []string) (int64, error) {
	if keep == nil {
		keep = []string{}
	}
	res, err := s.writer().ExecContext(ctx, `DELETE FROM token_usage_flushes WHERE applied_at < $1 AND flush_id <> ALL($2)`,
		before, pq.Array(keep))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// UsageStats implements authtoken.TokenStore: the token and which of flushIDs are applied, in
// one statement and therefore one snapshot.
func (s *Tokens) UsageStats(ctx context.Context, id int64, v authtoken.Visibility, flushIDs []string) (authtoken.Token, []string, error) {
	if flushIDs == nil {
		flushIDs = []string{}
	}
	var r struct {
		tokenRow
		Applied pq.StringArray `db:"applied"`
	}
	err := s.DB.GetContext(ctx, &r, `
		SELECT `+tokenColumns+`,
			ARRAY(SELECT flush_id FROM token_usage_flushes WHERE flush_id = ANY($4)) AS applied
		FROM api_tokens WHERE id = $1 AND `+visibleAt(2), id, v.AllUsers, v.UserID, pq.Array(flushIDs))
	if errors.Is(err, sql.ErrNoRows) {
		return authtoken.Token{}, nil, problem.ErrNotFound
	}
	return r.token(), r.Applied, err
}
