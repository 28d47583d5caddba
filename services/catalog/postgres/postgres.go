// Package postgres stores the catalog in PostgreSQL (tables of migration 00006): instruments,
// sources with their aliases, observing programs with their obs units (catalog.Store), and the
// visibility side (precalc.Store): sources as the engine reads them (engine_sources.go), the
// heatmap cache (heatmap_cache.go) and precalculation jobs (precalc_jobs.go). Every write is one
// transaction; constraint violations become the catalog's conflict errors.
package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
)

// Store is the catalog's PostgreSQL store.
type Store struct {
	// DB answers reads (at a secondary site the local replica).
	DB *sqlx.DB
	// Write, when set, takes every statement that changes rows: the main site's primary
	// (database.Pools.Write), and every statement on precalculation jobs, reads included: a job
	// is created at the main site and must be found right after, before the replica has it.
	// Unset: DB.
	Write *sqlx.DB
	// Cone, when set, is a pool opened with ConeDSN that answers plain cone searches through a
	// statement prepared once per connection (no planning per request); nil: every query on DB.
	Cone *sqlx.DB

	coneMu   sync.Mutex
	coneStmt *sqlx.Stmt // prepared on first use; database/sql prepares it again on each new connection
}

// writer is the pool for changes (see Write).
func (s *Store) writer() *sqlx.DB {
	if s.Write != nil {
		return s.Write
	}
	return s.DB
}

// ConeDSN returns dsn (URL or key=value form) with the session settings of the cone-search pool:
// plan_cache_mode=force_generic_plan, so a prepared cone search is planned once per connection
// rather than per request (PostgreSQL would otherwise keep custom plans, the generic plan's cost
// estimate being pessimistic), and jit=off, since that pessimistic estimate would otherwise
// trigger JIT compilation (~1 s) of a query that runs in a few milliseconds.
func ConeDSN(dsn string) (string, error) {
	settings := [][2]string{{"plan_cache_mode", "force_generic_plan"}, {"jit", "off"}}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		v := u.Query()
		for _, kv := range settings {
			v.Set(kv[0], kv[1])
		}
		u.RawQuery = v.Encode()
		return u.String(), nil
	}
	for _, kv := range settings {
		dsn += " " + kv[0] + "=" + kv[1]
	}
	return strings.TrimSpace(dsn), nil
}

func pqCode(err error) (string, string) {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return string(pe.Code), pe.Constraint
	}
	return "", ""
}

const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// Instruments lists every instrument with its modules, by id.
func (s *Store) Instruments(ctx context.Context) ([]catalog.Instrument, error) {
	return s.instruments(ctx, 0)
}

// Instrument returns one instrument with its modules, or an error wrapping problem.ErrNotFound.
func (s *Store) Instrument(ctx context.Context, id int) (catalog.Instrument, error) {
	list, err := s.instruments(ctx, id)
	if err != nil {
		return catalog.Instrument{}, err
	}
	if len(list) == 0 {
		return catalog.Instrument{}, fmt.Errorf("no instrument with id %d: %w", id, problem.ErrNotFound)
	}
	return list[0], nil
}

func (s *Store) instruments(ctx context.Context, id int) ([]catalog.Instrument, error) {
	var rows []struct {
		ID          int            `db:"id"`
		Name        string         `db:"name"`
		Description string         `db:"description"`
		ModuleID    sql.NullInt64  `db:"module_id"`
		ModuleName  sql.NullString `db:"module_name"`
		Config      []byte         `db:"config"`
	}
	err := s.DB.SelectContext(ctx, &rows, `
		SELECT i.id, i.name, i.description, m.id AS module_id, m.name AS module_name, m.config
		FROM instruments i LEFT JOIN instrument_modules m ON m.instrument_id = i.id
		WHERE $1 = 0 OR i.id = $1
		ORDER BY i.id, m.id`, id)
	if err != nil {
		return nil, err
	}
	out := []catalog.Instrument{}
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].ID != r.ID {
			out = append(out, catalog.Instrument{ID: r.ID, Name: r.Name, Description: r.Description, Modules: []catalog.Module{}})
		}
		if r.ModuleID.Valid {
			m := catalog.Module{ID: int(r.ModuleID.Int64), Name: r.ModuleName.String, Config: map[string]any{}}
			if err := json.Unmarshal(r.Config, &m.Config); err != nil {
				return nil, fmt.Errorf("module %d config: %w", m.ID, err)
			}
			in := &out[len(out)-1]
			in.Modules = append(in.Modules, m)
		}
	}
	return out, nil
}

// likePattern makes a LIKE pattern matching s anywhere, with LIKE's wildcards in s escaped.
func likePattern(s string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s) + "%"
}
