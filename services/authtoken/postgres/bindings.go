package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// bindingsOf reads the kind and bindings of user id (sorted lists).
func bindingsOf(ctx context.Context, q sqlx.QueryerContext, id int64) (authtoken.KindBindings, error) {
	var r struct {
		Kind        sql.NullString `db:"service_kind"`
		Instruments pq.Int64Array  `db:"instruments"`
		Modules     pq.Int64Array  `db:"modules"`
		Locations   pq.Int64Array  `db:"locations"`
	}
	err := sqlx.GetContext(ctx, q, &r, `SELECT service_kind,
		ARRAY(SELECT instrument_id FROM service_bindings WHERE user_id = $1 AND instrument_id IS NOT NULL ORDER BY 1) AS instruments,
		ARRAY(SELECT instrument_module_id FROM service_bindings WHERE user_id = $1 AND instrument_module_id IS NOT NULL ORDER BY 1) AS modules,
		ARRAY(SELECT location_id FROM service_bindings WHERE user_id = $1 AND location_id IS NOT NULL ORDER BY 1) AS locations
		FROM users WHERE id = $1`, id)
	if err != nil {
		return authtoken.KindBindings{}, err
	}
	kb := authtoken.KindBindings{Kind: r.Kind.String}
	kb.Bindings.Instruments, kb.Bindings.Modules, kb.Bindings.Locations = nilIfEmpty(r.Instruments), nilIfEmpty(r.Modules), nilIfEmpty(r.Locations)
	return kb, nil
}

func nilIfEmpty(a []int64) []int64 {
	if len(a) == 0 {
		return nil
	}
	return a
}

// writeBindings sets user id's kind and inserts its bindings (none may exist). An unknown id is a
// problem.FieldError naming its list.
func writeBindings(ctx context.Context, tx *sqlx.Tx, id int64, kb authtoken.KindBindings) error {
	if _, err := tx.ExecContext(ctx, `UPDATE users SET service_kind = $2 WHERE id = $1`, id, kb.Kind); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO service_bindings (user_id, kind, instrument_id, instrument_module_id, location_id)
		SELECT $1::bigint, $2::text, x, NULL::integer, NULL::integer FROM unnest($3::integer[]) AS x
		UNION ALL SELECT $1, $2, NULL, x, NULL FROM unnest($4::integer[]) AS x
		UNION ALL SELECT $1, $2, NULL, NULL, x FROM unnest($5::integer[]) AS x`,
		id, kb.Kind, pq.Array(kb.Bindings.Instruments), pq.Array(kb.Bindings.Modules), pq.Array(kb.Bindings.Locations))
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23503" {
		switch pqErr.Constraint {
		case "service_bindings_instrument_id_fkey":
			return problem.Field("body.bindings.instruments", "no such instrument", kb.Bindings.Instruments)
		case "service_bindings_instrument_module_id_fkey":
			return problem.Field("body.bindings.instrument_modules", "no such instrument module", kb.Bindings.Modules)
		case "service_bindings_location_id_fkey":
			return problem.Field("body.bindings.locations", "no such data location", kb.Bindings.Locations)
		}
	}
	return err
}

// EnsureService implements authtoken.AccountStore: one transaction creates the account with its
// kind and bindings, so an unknown id leaves no account behind.
func (s *Users) EnsureService(ctx context.Context, name string, kb *authtoken.KindBindings) (u authtoken.User, created bool, stored authtoken.KindBindings, err error) {
	if !authtoken.ValidUsername(name) {
		return u, false, stored, problem.Field("body.account", "must be 1 to 255 characters without spaces or control characters", name)
	}
	var id int64
	err = database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		err := tx.GetContext(ctx, &id, `INSERT INTO users (username, is_service) VALUES ($1, true) ON CONFLICT (username) DO NOTHING RETURNING id`, name)
		switch {
		case err == nil:
			created = true
			if kb != nil {
				return writeBindings(ctx, tx, id, *kb)
			}
		case errors.Is(err, sql.ErrNoRows):
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return u, false, stored, err
	}
	// Read back where it was written: a secondary site's replica may not have the row yet.
	u, err = s.one(ctx, s.writer(), `SELECT `+userColumns+` FROM users WHERE username = $1`, name)
	if err != nil {
		return u, created, stored, err
	}
	stored, err = bindingsOf(ctx, s.writer(), u.ID)
	return u, created, stored, err
}

// SetBindings implements authtoken.AccountStore: the account row locked, its bindings replaced,
// the audit row written, in one transaction.
func (s *Users) SetBindings(ctx context.Context, username string, kb authtoken.KindBindings, a authtoken.Audit) (authtoken.ServiceAccountBindings, error) {
	var out authtoken.ServiceAccountBindings
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		var row struct {
			ID        int64 `db:"id"`
			IsService bool  `db:"is_service"`
		}
		if err := tx.GetContext(ctx, &row, `SELECT id, is_service FROM users WHERE username = $1 FOR UPDATE`, username); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return problem.ErrNotFound
			}
			return err
		}
		if !row.IsService {
			return authtoken.ErrNotServiceAccount
		}
		before, err := bindingsOf(ctx, tx, row.ID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM service_bindings WHERE user_id = $1`, row.ID); err != nil {
			return err
		}
		if err := writeBindings(ctx, tx, row.ID, kb); err != nil {
			return err
		}
		detail, err := json.Marshal(map[string]any{"account": username, "user_id": row.ID, "before": before, "after": kb})
		if err != nil {
			return err
		}
		var actorID *int64
		if a.Actor.UserID > 0 {
			actorID = &a.Actor.UserID
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO token_audit (actor_user_id, actor, token_id, action, detail) VALUES ($1, $2, NULL, $3, $4::jsonb)`,
			actorID, a.Actor.Name, a.Action, string(detail)); err != nil {
			return err
		}
		out = authtoken.ServiceAccountBindings{UserID: row.ID, Username: username, Kind: kb.Kind, Bindings: kb.Bindings}
		return nil
	})
	return out, err
}
