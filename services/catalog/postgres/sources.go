package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/resolve"
)

type sourceRow struct {
	ID             int64     `db:"id"`
	Name           string    `db:"name"`
	Kind           string    `db:"kind"`
	RADeg          *float64  `db:"ra_deg"`
	DecDeg         *float64  `db:"dec_deg"`
	PMRAMasYr      *float64  `db:"pm_ra_mas_yr"`
	PMDecMasYr     *float64  `db:"pm_dec_mas_yr"`
	Epoch          *float64  `db:"epoch"`
	ParallaxMas    *float64  `db:"parallax_mas"`
	RadialVelocity *float64  `db:"radial_velocity_kms"`
	Body           *string   `db:"body"`
	ElevationDeg   *float64  `db:"elevation_deg"`
	AzMinDeg       *float64  `db:"az_min_deg"`
	AzMaxDeg       *float64  `db:"az_max_deg"`
	ObjectType     *string   `db:"object_type"`
	CoordOrigin    string    `db:"coord_origin"`
	CoordReference *string   `db:"coord_reference"`
	CreatedAt      time.Time `db:"created_at"`
	UpdatedAt      time.Time `db:"updated_at"`
	DistanceDeg    *float64  `db:"distance_deg"`
	Total          int       `db:"total"`
	Key            string    `db:"key"` // LookupNames: the alias key that matched
	// Aliases is filled by the cone statement (the page's aliases in the same round trip).
	Aliases pq.StringArray `db:"aliases"`
}

func (r sourceRow) source() catalog.Source {
	return catalog.Source{ID: r.ID, Name: r.Name, Kind: r.Kind, RADeg: r.RADeg, DecDeg: r.DecDeg, PMRAMasYr: r.PMRAMasYr,
		PMDecMasYr: r.PMDecMasYr, Epoch: r.Epoch, ParallaxMas: r.ParallaxMas, RadialVelocity: r.RadialVelocity, Body: r.Body, ElevationDeg: r.ElevationDeg, AzMinDeg: r.AzMinDeg,
		AzMaxDeg: r.AzMaxDeg, ObjectType: r.ObjectType, CoordOrigin: r.CoordOrigin, CoordReference: r.CoordReference,
		DistanceDeg: r.DistanceDeg, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Aliases: append([]string{}, r.Aliases...)}
}

const sourceColumns = `s.id, s.name, s.kind, s.ra_deg, s.dec_deg, s.pm_ra_mas_yr, s.pm_dec_mas_yr, s.epoch, s.parallax_mas, s.radial_velocity_kms, s.body,
	s.elevation_deg, s.az_min_deg, s.az_max_deg, s.object_type, s.coord_origin, s.coord_reference, s.created_at, s.updated_at`

// ListSources answers one page of sources: by name without a cone, by distance from the
// centre with one (q3c_radial_query, served by the q3c index; exact across RA 0/360 and at the
// poles). q matches any part of a name or alias, ignoring case and white space.
func (s *Store) ListSources(ctx context.Context, q catalog.SourceQuery) (catalog.Page[catalog.Source], error) {
	if s.Cone != nil && q.RADeg != nil && q.DecDeg != nil && q.Radius != nil && q.Q == "" && q.Kind == "" && q.ProgramID == 0 {
		return s.coneSearch(ctx, q)
	}
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	distance := "NULL::double precision"
	order := "s.name"
	if q.RADeg != nil && q.DecDeg != nil && q.Radius != nil {
		ra, dec, r := arg(*q.RADeg), arg(*q.DecDeg), arg(*q.Radius)
		where = append(where, fmt.Sprintf("q3c_radial_query(s.ra_deg, s.dec_deg, %s, %s, %s)", ra, dec, r))
		distance = fmt.Sprintf("q3c_dist(s.ra_deg, s.dec_deg, %s, %s)", ra, dec)
		order = "distance_deg, s.id"
	}
	if q.Q != "" {
		where = append(where, "EXISTS (SELECT 1 FROM source_aliases a WHERE a.source_id = s.id AND a.alias_key LIKE "+arg(likePattern(catalog.NameKey(q.Q)))+")")
	}
	if q.Kind != "" {
		where = append(where, "s.kind = "+arg(q.Kind))
	}
	if q.ProgramID != 0 {
		where = append(where, "EXISTS (SELECT 1 FROM obs_units u WHERE u.source_id = s.id AND u.program_id = "+arg(q.ProgramID)+")")
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	limit, offset := arg(q.Limit), arg(q.Offset)
	var rows []sourceRow
	err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+sourceColumns+`, `+distance+` AS distance_deg, count(*) OVER () AS total
		FROM sources s `+cond+`
		ORDER BY `+order+` LIMIT `+limit+` OFFSET `+offset, args...)
	if err != nil {
		return catalog.Page[catalog.Source]{}, err
	}
	page := catalog.Page[catalog.Source]{Items: make([]catalog.Source, 0, len(rows)), Limit: q.Limit, Offset: q.Offset}
	for _, r := range rows {
		page.Items = append(page.Items, r.source())
		page.Total = r.Total
	}
	if len(rows) == 0 && q.Offset > 0 {
		if err := s.DB.GetContext(ctx, &page.Total, `SELECT count(*) FROM sources s `+cond, args[:len(args)-2]...); err != nil {
			return page, err
		}
	}
	return page, s.attachAliases(ctx, s.DB, page.Items)
}

// coneSQL is the plain cone search (no other filter), prepared once per connection of the Cone
// pool: q3c_radial_query on the sources_q3c index, the distance computed once per row, sorted by
// it with the page's LIMIT (a top-N sort), total from the same scan, and the aliases of the
// page's sources only (after the LIMIT) in the same round trip.
const coneSQL = `
	SELECT p.*, ARRAY(SELECT a.alias FROM source_aliases a WHERE a.source_id = p.id AND NOT a.is_name ORDER BY a.id) AS aliases
	FROM (
		SELECT ` + sourceColumns + `, d.distance_deg, count(*) OVER () AS total
		FROM sources s CROSS JOIN LATERAL (SELECT q3c_dist(s.ra_deg, s.dec_deg, $1, $2) AS distance_deg) d
		WHERE q3c_radial_query(s.ra_deg, s.dec_deg, $1, $2, $3)
		ORDER BY d.distance_deg, s.id LIMIT $4 OFFSET $5
	) p
	ORDER BY p.distance_deg, p.id`

// coneSearch answers a plain cone search with the statement prepared on the Cone pool, whose
// sessions use generic plans without JIT (ConeDSN): q3c expands a cone into 100 index ranges,
// and planning them anew for every request cost as much as running the query.
func (s *Store) coneSearch(ctx context.Context, q catalog.SourceQuery) (catalog.Page[catalog.Source], error) {
	stmt, err := s.coneStatement(ctx)
	if err != nil {
		return catalog.Page[catalog.Source]{}, err
	}
	var rows []sourceRow
	if err := stmt.SelectContext(ctx, &rows, *q.RADeg, *q.DecDeg, *q.Radius, q.Limit, q.Offset); err != nil {
		return catalog.Page[catalog.Source]{}, err
	}
	page := catalog.Page[catalog.Source]{Items: make([]catalog.Source, 0, len(rows)), Limit: q.Limit, Offset: q.Offset}
	for _, r := range rows {
		page.Items = append(page.Items, r.source())
		page.Total = r.Total
	}
	if len(rows) == 0 && q.Offset > 0 { // past the end: the window saw no row, count alone
		if err := s.Cone.GetContext(ctx, &page.Total, `SELECT count(*) FROM sources s WHERE q3c_radial_query(s.ra_deg, s.dec_deg, $1, $2, $3)`,
			*q.RADeg, *q.DecDeg, *q.Radius); err != nil {
			return page, err
		}
	}
	return page, nil
}

// coneStatement prepares the cone statement on first use; a failure (database unreachable) is
// returned and retried on the next request rather than kept.
func (s *Store) coneStatement(ctx context.Context) (*sqlx.Stmt, error) {
	s.coneMu.Lock()
	defer s.coneMu.Unlock()
	if s.coneStmt == nil {
		stmt, err := s.Cone.PreparexContext(ctx, coneSQL)
		if err != nil {
			return nil, err
		}
		s.coneStmt = stmt
	}
	return s.coneStmt, nil
}

func (s *Store) attachAliases(ctx context.Context, db sqlx.QueryerContext, sources []catalog.Source) error {
	if len(sources) == 0 {
		return nil
	}
	ids := make([]int64, len(sources))
	at := map[int64]int{}
	for i, src := range sources {
		ids[i] = src.ID
		at[src.ID] = i
	}
	var rows []struct {
		SourceID int64  `db:"source_id"`
		Alias    string `db:"alias"`
	}
	if err := sqlx.SelectContext(ctx, db, &rows, `
		SELECT source_id, alias FROM source_aliases WHERE source_id = ANY($1) AND NOT is_name ORDER BY source_id, id`, pq.Array(ids)); err != nil {
		return err
	}
	for _, r := range rows {
		src := &sources[at[r.SourceID]]
		src.Aliases = append(src.Aliases, r.Alias)
	}
	return nil
}

// GetSource returns one source with its aliases, or an error wrapping problem.ErrNotFound.
func (s *Store) GetSource(ctx context.Context, id int64) (catalog.Source, error) {
	return s.getSource(ctx, s.DB, id)
}

func (s *Store) getSource(ctx context.Context, db sqlx.QueryerContext, id int64) (catalog.Source, error) {
	var r sourceRow
	err := sqlx.GetContext(ctx, db, &r, `SELECT `+sourceColumns+`, NULL::double precision AS distance_deg, 1 AS total FROM sources s WHERE s.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return catalog.Source{}, fmt.Errorf("no source with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return catalog.Source{}, err
	}
	out := []catalog.Source{r.source()}
	if err := s.attachAliases(ctx, db, out); err != nil {
		return catalog.Source{}, err
	}
	return out[0], nil
}

// CreateSource stores a source with its aliases in one transaction. A name or alias equal (case
// and white space ignored) to any name or alias of another source is a conflict naming the field.
func (s *Store) CreateSource(ctx context.Context, spec catalog.SourceSpec, by string) (catalog.Source, error) {
	var out catalog.Source
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if err := checkNamesFree(ctx, tx, 0, spec); err != nil {
			return err
		}
		var id int64
		err := tx.GetContext(ctx, &id, `
			INSERT INTO sources (name, kind, ra_deg, dec_deg, pm_ra_mas_yr, pm_dec_mas_yr, epoch, body, elevation_deg,
				az_min_deg, az_max_deg, object_type, coord_origin, coord_reference, created_by, parallax_mas, radial_velocity_kms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, NULLIF($15, ''), $16, $17) RETURNING id`,
			spec.Name, spec.Kind, spec.RADeg, spec.DecDeg, spec.PMRAMasYr, spec.PMDecMasYr, spec.Epoch, spec.Body,
			spec.ElevationDeg, spec.AzMinDeg, spec.AzMaxDeg, spec.ObjectType, spec.CoordOrigin, spec.CoordReference, by,
			spec.ParallaxMas, spec.RadialVelocity)
		if err != nil {
			return sourceWriteError(err)
		}
		if err := writeNames(ctx, tx, id, spec); err != nil {
			return err
		}
		out, err = s.getSource(ctx, tx, id)
		return err
	})
	return out, err
}

// ReplaceSource replaces a source's fields and aliases in one transaction.
func (s *Store) ReplaceSource(ctx context.Context, id int64, spec catalog.SourceSpec, check func(catalog.SourceOwners) error) (catalog.Source, error) {
	var out catalog.Source
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if err := lockSource(ctx, tx, id, check); err != nil {
			return err
		}
		if err := checkNamesFree(ctx, tx, id, spec); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
			UPDATE sources SET name = $2, kind = $3, ra_deg = $4, dec_deg = $5, pm_ra_mas_yr = $6, pm_dec_mas_yr = $7,
				epoch = $8, body = $9, elevation_deg = $10, az_min_deg = $11, az_max_deg = $12, object_type = $13,
				coord_origin = $14, coord_reference = $15, parallax_mas = $16, radial_velocity_kms = $17
			WHERE id = $1`, id, spec.Name, spec.Kind, spec.RADeg, spec.DecDeg, spec.PMRAMasYr, spec.PMDecMasYr, spec.Epoch,
			spec.Body, spec.ElevationDeg, spec.AzMinDeg, spec.AzMaxDeg, spec.ObjectType, spec.CoordOrigin, spec.CoordReference,
			spec.ParallaxMas, spec.RadialVelocity)
		if err != nil {
			return sourceWriteError(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM source_aliases WHERE source_id = $1`, id); err != nil {
			return err
		}
		if err := writeNames(ctx, tx, id, spec); err != nil {
			return err
		}
		out, err = s.getSource(ctx, tx, id)
		return err
	})
	return out, err
}

// DeleteSource deletes a source and its aliases; one used by an obs unit is a conflict naming
// the programs that use it.
func (s *Store) DeleteSource(ctx context.Context, id int64, check func(catalog.SourceOwners) error) error {
	var res sql.Result
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if err := lockSource(ctx, tx, id, check); err != nil {
			return err
		}
		var err error
		res, err = tx.ExecContext(ctx, `DELETE FROM sources WHERE id = $1`, id)
		return err
	})
	if code, _ := pqCode(err); code == foreignKeyViolation {
		var programs []string
		_ = s.writer().SelectContext(ctx, &programs, `
			SELECT DISTINCT p.short_name FROM obs_units u JOIN observing_programs p ON p.id = u.program_id
			WHERE u.source_id = $1 ORDER BY 1 LIMIT 20`, id)
		msg := "the source is used by obs units of program(s) " + strings.Join(programs, ", ") + "; remove them from those programs first"
		// Executions of those obs units keep them, and so the source, for good: named too.
		if refs, err := s.executions(ctx, `u.source_id = $1`, id); err == nil && len(refs) > 0 {
			names := make([]string, len(refs))
			for i, r := range refs {
				names[i] = fmt.Sprintf("%s (obs unit %d)", r.ID, r.ObsUnitID)
			}
			msg += "; obs units with executions (" + strings.Join(names, ", ") + ") cannot be removed: archive their programs instead"
		}
		return &catalog.ConflictError{Message: msg}
	}
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("no source with id %d: %w", id, problem.ErrNotFound)
	}
	return nil
}

// lockSource locks source id's row for the rest of tx (FOR UPDATE: no obs unit starts using it
// meanwhile, checkUnitRefs taking FOR KEY SHARE) and the programs using it (FOR SHARE: their
// owners do not change meanwhile), and asks check whether the source may change.
func lockSource(ctx context.Context, tx *sqlx.Tx, id int64, check func(catalog.SourceOwners) error) error {
	var createdBy sql.NullString
	if err := tx.GetContext(ctx, &createdBy, `SELECT created_by FROM sources WHERE id = $1 FOR UPDATE`, id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no source with id %d: %w", id, problem.ErrNotFound)
		}
		return err
	}
	var rows []struct {
		ID         int64          `db:"id"`
		ShortName  string         `db:"short_name"`
		PIUsername sql.NullString `db:"pi_username"`
		Members    pq.StringArray `db:"members"`
	}
	if err := tx.SelectContext(ctx, &rows, `
		SELECT p.id, p.short_name, p.pi_username,
			ARRAY(SELECT m.username FROM observing_program_members m WHERE m.program_id = p.id) AS members
		FROM observing_programs p
		WHERE p.id IN (SELECT u.program_id FROM obs_units u WHERE u.source_id = $1)
		ORDER BY p.id FOR SHARE OF p`, id); err != nil {
		return err
	}
	o := catalog.SourceOwners{CreatedBy: createdBy.String}
	for _, r := range rows {
		o.Programs = append(o.Programs, catalog.Program{ID: r.ID, ShortName: r.ShortName, PIUsername: r.PIUsername.String, Members: r.Members})
	}
	return check(o)
}

// checkNamesFree answers a conflict naming the field whose name or alias another source already uses.
func checkNamesFree(ctx context.Context, tx *sqlx.Tx, self int64, spec catalog.SourceSpec) error {
	keys := []string{catalog.NameKey(spec.Name)}
	fields := []string{"name"}
	for i, a := range spec.Aliases {
		keys = append(keys, catalog.NameKey(a))
		fields = append(fields, fmt.Sprintf("aliases[%d]", i))
	}
	var taken []struct {
		Key  string `db:"alias_key"`
		Name string `db:"name"`
	}
	if err := tx.SelectContext(ctx, &taken, `
		SELECT a.alias_key, s.name FROM source_aliases a JOIN sources s ON s.id = a.source_id
		WHERE a.alias_key = ANY($1) AND a.source_id <> $2`, pq.Array(keys), self); err != nil {
		return err
	}
	owner := map[string]string{}
	for _, t := range taken {
		owner[t.Key] = t.Name
	}
	for i, k := range keys {
		if other, ok := owner[k]; ok {
			what := spec.Name
			if i > 0 {
				what = spec.Aliases[i-1]
			}
			return &catalog.ConflictError{Location: "body." + fields[i], Message: fmt.Sprintf("%q is already a name or alias of source %q", what, other)}
		}
	}
	return nil
}

// writeNames inserts the source's own name (is_name) and its aliases in one statement.
func writeNames(ctx context.Context, tx *sqlx.Tx, id int64, spec catalog.SourceSpec) error {
	names := append([]string{spec.Name}, spec.Aliases...)
	_, err := tx.ExecContext(ctx, `
		INSERT INTO source_aliases (source_id, alias, is_name)
		SELECT $1, n.alias, n.ord = 1 FROM unnest($2::text[]) WITH ORDINALITY AS n(alias, ord) ORDER BY n.ord`,
		id, pq.Array(names))
	return sourceWriteError(err)
}

func sourceWriteError(err error) error {
	if err == nil {
		return nil
	}
	code, constraint := pqCode(err)
	if code == uniqueViolation && (constraint == "sources_name_key" || constraint == "source_aliases_alias_key_key") {
		// Another writer took the name between the check and the insert.
		return &catalog.ConflictError{Location: "body.name", Message: "the name or an alias was taken by another source meanwhile"}
	}
	return err
}

// ProgramsUsing lists the programs with obs units on a source, by short name.
func (s *Store) ProgramsUsing(ctx context.Context, sourceID int64) ([]catalog.ProgramRef, error) {
	out := []catalog.ProgramRef{}
	err := s.DB.SelectContext(ctx, &out, `
		SELECT DISTINCT p.id, p.short_name FROM obs_units u JOIN observing_programs p ON p.id = u.program_id
		WHERE u.source_id = $1 ORDER BY p.short_name`, sourceID)
	return out, err
}

// ObsUnitsUsing lists every obs unit on a source with its program.
func (s *Store) ObsUnitsUsing(ctx context.Context, sourceID int64) ([]catalog.SourceObsUnitRef, error) {
	var rows []struct {
		obsUnitRow
		ShortName string `db:"short_name"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+obsUnitColumns+`, p.short_name FROM obs_units u JOIN sources s ON s.id = u.source_id
		JOIN observing_programs p ON p.id = u.program_id
		WHERE u.source_id = $1 ORDER BY p.short_name, u.id`, sourceID); err != nil {
		return nil, err
	}
	out := make([]catalog.SourceObsUnitRef, len(rows))
	for i, r := range rows {
		out[i] = catalog.SourceObsUnitRef{ObsUnit: r.unit(), Program: catalog.ProgramRef{ID: r.ProgramID, ShortName: r.ShortName}}
	}
	return out, nil
}

// LookupNames implements resolve.Lookup: sources whose name or alias matches, case and white
// space ignored, in one query.
func (s *Store) LookupNames(ctx context.Context, names []string) (map[string]resolve.Answer, error) {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = catalog.NameKey(n)
	}
	var rows []sourceRow
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+sourceColumns+`, NULL::double precision AS distance_deg, 1 AS total, a.alias_key AS key
		FROM source_aliases a JOIN sources s ON s.id = a.source_id WHERE a.alias_key = ANY($1)`, pq.Array(keys)); err != nil {
		return nil, err
	}
	var srcs []catalog.Source
	at := map[int64]int{}
	for _, r := range rows {
		if _, dup := at[r.ID]; !dup {
			at[r.ID] = len(srcs)
			srcs = append(srcs, r.source())
		}
	}
	if err := s.attachAliases(ctx, s.DB, srcs); err != nil {
		return nil, err
	}
	byKey := map[string]catalog.Source{}
	for _, r := range rows {
		byKey[r.Key] = srcs[at[r.ID]]
	}
	out := map[string]resolve.Answer{}
	for i, n := range names {
		src, ok := byKey[keys[i]]
		if !ok {
			continue
		}
		id := src.ID
		a := resolve.Answer{Input: n, Found: true, Name: src.Name, RADeg: src.RADeg, DecDeg: src.DecDeg, Aliases: src.Aliases,
			Resolver: resolve.ByDatabase, SourceID: &id, Kind: src.Kind, Reference: fmt.Sprintf("source %d", src.ID)}
		if src.ObjectType != nil {
			a.ObjectType = *src.ObjectType
		}
		out[n] = a
	}
	return out, nil
}
