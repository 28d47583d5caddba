package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/visibility"
)

type programRow struct {
	ID             int64          `db:"id"`
	ShortName      string         `db:"short_name"`
	Title          string         `db:"title"`
	PI             string         `db:"pi"`
	PIUsername     sql.NullString `db:"pi_username"`
	Description    string         `db:"description"`
	Status         string         `db:"status"`
	AllocatedHours *float64       `db:"allocated_hours"`
	CreatedBy      sql.NullString `db:"created_by"`
	CreatedAt      time.Time      `db:"created_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
	Total          int            `db:"total"`
}

func (r programRow) program() catalog.Program {
	return catalog.Program{ID: r.ID, ShortName: r.ShortName, Title: r.Title, PI: r.PI, PIUsername: r.PIUsername.String, Members: []string{}, Description: r.Description,
		Status: r.Status, AllocatedHours: r.AllocatedHours, CreatedBy: r.CreatedBy.String,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), ObsUnits: []catalog.ObsUnit{}}
}

const programColumns = `p.id, p.short_name, p.title, p.pi, p.pi_username, p.description, p.status, p.allocated_hours, p.created_by, p.created_at, p.updated_at`

type obsUnitRow struct {
	ID                   int64    `db:"id"`
	ProgramID            int64    `db:"program_id"`
	Name                 string   `db:"name"`
	SourceID             int64    `db:"source_id"`
	SourceName           string   `db:"source_name"`
	InstrumentModuleID   int      `db:"instrument_module_id"`
	DurationS            float64  `db:"duration_s"`
	MinElevationDeg      *float64 `db:"min_elevation_deg"`
	Priority             *int     `db:"priority"`
	MaxAirmass           *float64 `db:"max_airmass"`
	MinMoonSeparationDeg *float64 `db:"min_moon_separation_deg"`
	MinSunSeparationDeg  *float64 `db:"min_sun_separation_deg"`
	MaxPWVmm             *float64 `db:"max_pwv_mm"`
	LSTStartHours        *float64 `db:"lst_start_hours"`
	LSTEndHours          *float64 `db:"lst_end_hours"`
	TimeWindows          []byte   `db:"time_windows"` // JSON [{start, end}] (obsUnitColumns)
}

func (r obsUnitRow) unit() catalog.ObsUnit {
	u := catalog.ObsUnit{ID: r.ID, Name: r.Name, SourceID: r.SourceID, SourceName: r.SourceName,
		InstrumentModuleID: r.InstrumentModuleID, DurationS: r.DurationS, MinElevationDeg: r.MinElevationDeg, Priority: r.Priority,
		ObsUnitConstraints: catalog.ObsUnitConstraints{MaxAirmass: r.MaxAirmass, MinMoonSeparationDeg: r.MinMoonSeparationDeg,
			MinSunSeparationDeg: r.MinSunSeparationDeg, MaxPWVmm: r.MaxPWVmm}}
	if r.LSTStartHours != nil && r.LSTEndHours != nil {
		u.LSTRange = &visibility.LSTRange{StartHours: *r.LSTStartHours, EndHours: *r.LSTEndHours}
	}
	if len(r.TimeWindows) > 0 {
		// written by the database from a checked column: cannot fail but by a bug, which shows as no windows
		_ = json.Unmarshal(r.TimeWindows, &u.TimeWindows)
		for i := range u.TimeWindows {
			u.TimeWindows[i].Start, u.TimeWindows[i].End = u.TimeWindows[i].Start.UTC(), u.TimeWindows[i].End.UTC()
		}
	}
	return u
}

const obsUnitColumns = `u.id, u.program_id, u.name, u.source_id, s.name AS source_name, u.instrument_module_id, u.duration_s, u.min_elevation_deg, u.priority,
	u.max_airmass, u.min_moon_separation_deg, u.min_sun_separation_deg, u.max_pwv_mm, u.lst_start_hours, u.lst_end_hours,
	(SELECT jsonb_agg(jsonb_build_object('start', lower(w), 'end', upper(w)) ORDER BY lower(w)) FROM unnest(u.time_windows) w) AS time_windows`

// programFilter is the WHERE clause of a program list ($1 status, $2 PI, $3 name pattern), shared
// by the page query and the past-the-end count so the two can never disagree.
const programFilter = `
		WHERE ($1 = '' OR p.status = $1)
		  AND ($2 = '' OR lower(p.pi) = lower($2))
		  AND ($3 = '' OR p.short_name ILIKE $3 OR p.title ILIKE $3)`

// ListPrograms answers one page of programs sorted by short name, with their obs units.
func (s *Store) ListPrograms(ctx context.Context, q catalog.ProgramQuery) (catalog.Page[catalog.Program], error) {
	var rows []programRow
	err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+programColumns+`, count(*) OVER () AS total
		FROM observing_programs p`+programFilter+`
		ORDER BY p.short_name
		LIMIT $4 OFFSET $5`, q.Status, q.PI, qPattern(q.Q), q.Limit, q.Offset)
	if err != nil {
		return catalog.Page[catalog.Program]{}, err
	}
	page := catalog.Page[catalog.Program]{Items: make([]catalog.Program, 0, len(rows)), Limit: q.Limit, Offset: q.Offset}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		page.Items = append(page.Items, r.program())
		ids[i] = r.ID
		page.Total = r.Total
	}
	if len(rows) == 0 && q.Offset > 0 { // past the end: the total still counts
		if err := s.DB.GetContext(ctx, &page.Total, `
			SELECT count(*) FROM observing_programs p`+programFilter, q.Status, q.PI, qPattern(q.Q)); err != nil {
			return page, err
		}
	}
	if err := s.attachUnits(ctx, s.DB, page.Items, ids); err != nil {
		return page, err
	}
	return page, nil
}

func qPattern(q string) string {
	if q == "" {
		return ""
	}
	return likePattern(q)
}

// attachUnits fills in the obs units and the members of programs (ids theirs, in order): one
// query each, whatever the number of programs.
func (s *Store) attachUnits(ctx context.Context, db sqlx.QueryerContext, programs []catalog.Program, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	var members []struct {
		ProgramID int64  `db:"program_id"`
		Username  string `db:"username"`
	}
	if err := sqlx.SelectContext(ctx, db, &members, `
		SELECT program_id, username FROM observing_program_members
		WHERE program_id = ANY($1) ORDER BY program_id, username COLLATE "C"`, pq.Array(ids)); err != nil {
		return err
	}
	at := map[int64]int{}
	for i, p := range programs {
		at[p.ID] = i
	}
	for _, m := range members {
		p := &programs[at[m.ProgramID]]
		p.Members = append(p.Members, m.Username)
	}
	var units []obsUnitRow
	if err := sqlx.SelectContext(ctx, db, &units, `
		SELECT `+obsUnitColumns+` FROM obs_units u JOIN sources s ON s.id = u.source_id
		WHERE u.program_id = ANY($1) ORDER BY u.program_id, u.id`, pq.Array(ids)); err != nil {
		return err
	}
	for _, u := range units {
		p := &programs[at[u.ProgramID]]
		p.ObsUnits = append(p.ObsUnits, u.unit())
	}
	return nil
}

// GetProgram returns one program with its obs units, or an error wrapping problem.ErrNotFound.
func (s *Store) GetProgram(ctx context.Context, id int64) (catalog.Program, error) {
	return s.getProgram(ctx, s.DB, id)
}

func (s *Store) getProgram(ctx context.Context, db sqlx.QueryerContext, id int64) (catalog.Program, error) {
	var r programRow
	err := sqlx.GetContext(ctx, db, &r, `SELECT `+programColumns+`, 1 AS total FROM observing_programs p WHERE p.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return catalog.Program{}, fmt.Errorf("no program with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return catalog.Program{}, err
	}
	ps := []catalog.Program{r.program()}
	if err := s.attachUnits(ctx, db, ps, []int64{id}); err != nil {
		return catalog.Program{}, err
	}
	return ps[0], nil
}

// CreateProgram stores a new program with its obs units in one transaction.
func (s *Store) CreateProgram(ctx context.Context, spec catalog.ProgramSpec, by string) (catalog.Program, error) {
	var out catalog.Program
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if err := checkUnitRefs(ctx, tx, spec.ObsUnits); err != nil {
			return err
		}
		var id int64
		err := tx.GetContext(ctx, &id, `
			INSERT INTO observing_programs (short_name, title, pi, pi_username, description, status, allocated_hours, created_by)
			VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7, NULLIF($8, '')) RETURNING id`,
			spec.ShortName, spec.Title, spec.PI, spec.PIUsername, spec.Description, spec.Status, spec.AllocatedHours, by)
		if err != nil {
			return programWriteError(err, spec.ShortName)
		}
		if err := writeMembers(ctx, tx, id, spec.Members); err != nil {
			return err
		}
		if err := upsertUnits(ctx, tx, id, spec.ObsUnits); err != nil {
			return err
		}
		out, err = s.getProgram(ctx, tx, id)
		return err
	})
	return out, err
}

// ReplaceProgram locks a program and writes what build makes of it as it is then: its fields,
// its members, and, when the spec's ObsUnits is not nil, its obs units: units matched by name
// keep their ids, new names are created, missing names are deleted (a unit with executed
// observations cannot be: 409).
func (s *Store) ReplaceProgram(ctx context.Context, id int64, build catalog.ProgramBuilder, guard catalog.DeleteGuard) (catalog.Program, error) {
	var out catalog.Program
	var spec catalog.ProgramSpec
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if err := lockProgram(ctx, tx, id); err != nil {
			return err
		}
		cur, err := s.getProgram(ctx, tx, id)
		if err != nil {
			return err
		}
		if spec, err = build(cur); err != nil {
			return err
		}
		if err := checkUnitRefs(ctx, tx, spec.ObsUnits); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE observing_programs SET short_name = $2, title = $3, pi = $4, description = $5, status = $6, allocated_hours = $7,
				pi_username = NULLIF($8, '')
			WHERE id = $1`, id, spec.ShortName, spec.Title, spec.PI, spec.Description, spec.Status, spec.AllocatedHours, spec.PIUsername)
		if err != nil {
			return programWriteError(err, spec.ShortName)
		}
		if spec.Members != nil && !slices.Equal(sorted(spec.Members), cur.Members) {
			if _, err := tx.ExecContext(ctx, `DELETE FROM observing_program_members WHERE program_id = $1`, id); err != nil {
				return err
			}
			if err := writeMembers(ctx, tx, id, spec.Members); err != nil {
				return err
			}
		}
		if spec.ObsUnits != nil {
			names := make([]string, len(spec.ObsUnits))
			for i, u := range spec.ObsUnits {
				names[i] = u.Name
			}
			var dropped []int64
			if err := tx.SelectContext(ctx, &dropped, `DELETE FROM obs_units WHERE program_id = $1 AND NOT (name = ANY($2)) RETURNING id`, id, pq.Array(names)); err != nil {
				return programWriteError(err, spec.ShortName)
			}
			if err := upsertUnits(ctx, tx, id, spec.ObsUnits); err != nil {
				return err
			}
			if err := guard(dropped); err != nil {
				return err
			}
		} else if err := guard(nil); err != nil {
			return err
		}
		out, err = s.getProgram(ctx, tx, id)
		return err
	})
	names := make([]string, len(spec.ObsUnits))
	for i, u := range spec.ObsUnits {
		names[i] = u.Name
	}
	return out, s.executionsConflict(ctx, err, id, names...)
}

// lockProgram locks program id's row for the rest of tx (an error wrapping problem.ErrNotFound
// if there is none): no unit is added to it meanwhile.
func lockProgram(ctx context.Context, tx *sqlx.Tx, id int64) error {
	var exists bool
	if err := tx.GetContext(ctx, &exists, `SELECT true FROM observing_programs WHERE id = $1 FOR UPDATE`, id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no program with id %d: %w", id, problem.ErrNotFound)
		}
		return err
	}
	return nil
}

// DeleteProgram deletes a program and its obs units in one transaction, calling guard with the
// obs units' ids before it commits; one with executed observations cannot be deleted (the
// executed-observation rows' foreign key answers 23503: a 409 naming them).
func (s *Store) DeleteProgram(ctx context.Context, id int64, check func(catalog.Program) error, guard catalog.DeleteGuard) error {
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		// The program's row lock keeps units from being added to it meanwhile, and its owners
		// from changing.
		if err := lockProgram(ctx, tx, id); err != nil {
			return err
		}
		cur, err := s.getProgram(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := check(cur); err != nil {
			return err
		}
		var units []int64
		if err := tx.SelectContext(ctx, &units, `DELETE FROM obs_units WHERE program_id = $1 RETURNING id`, id); err != nil {
			return programWriteError(err, "")
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM observing_programs WHERE id = $1`, id); err != nil {
			return programWriteError(err, "")
		}
		return guard(units)
	})
	return s.executionsConflict(ctx, err, id)
}

// executionsConflict turns the foreign-key conflict of deleting obs units of program id (err,
// after its transaction rolled back) into an *catalog.ExecutionsConflictError naming the
// executions that reference them (at most 100): all the program's units, or those not named in
// keep (a PUT's units).
func (s *Store) executionsConflict(ctx context.Context, err error, programID int64, keep ...string) error {
	var ee *executedUnitsError
	if !errors.As(err, &ee) {
		return err
	}
	refs, qerr := s.executions(ctx, `u.program_id = $1 AND NOT (u.name = ANY($2))`, programID, pq.Array(append([]string{}, keep...)))
	if qerr != nil || len(refs) == 0 {
		return err
	}
	return &catalog.ExecutionsConflictError{Executions: refs}
}

// ExecutionsOf lists the committed executions of obs units (at most 100), by obs unit.
func (s *Store) ExecutionsOf(ctx context.Context, obsUnitIDs []int64) ([]catalog.ExecutionRef, error) {
	return s.executions(ctx, `u.id = ANY($1)`, pq.Array(obsUnitIDs))
}

func (s *Store) executions(ctx context.Context, where string, args ...any) ([]catalog.ExecutionRef, error) {
	var rows []struct {
		ID        string `db:"id"`
		ObsUnitID int64  `db:"obs_unit_id"`
	}
	// On the main database (the writer): a row just committed there must be named.
	if err := s.writer().SelectContext(ctx, &rows, `
		SELECT e.id::text AS id, e.obs_unit_id FROM executed_obs_units e JOIN obs_units u ON u.id = e.obs_unit_id
		WHERE `+where+` ORDER BY e.obs_unit_id, e.id LIMIT 100`, args...); err != nil {
		return nil, err
	}
	out := make([]catalog.ExecutionRef, len(rows))
	for i, r := range rows {
		out[i] = catalog.ExecutionRef{ID: r.ID, ObsUnitID: r.ObsUnitID}
	}
	return out, nil
}

// executedUnitsError is a delete of obs units refused by the foreign key of executed_obs_units
// (409; executionsConflict names the executions when it can).
type executedUnitsError struct{ constraint string }

func (e *executedUnitsError) Error() string {
	return "the program has obs units with executed observations, which cannot be deleted (" + e.constraint + ")"
}

// ProblemKind makes it a 409 (problem.Kinded).
func (e *executedUnitsError) ProblemKind() problem.Kind { return problem.Conflict }

func programWriteError(err error, shortName string) error {
	code, constraint := pqCode(err)
	switch {
	case code == uniqueViolation && constraint == "observing_programs_short_name_key":
		return &catalog.ConflictError{Location: "body.short_name", Message: fmt.Sprintf("short_name %q is taken by another program", shortName)}
	case code == foreignKeyViolation:
		return &executedUnitsError{constraint}
	}
	return err
}

// writeMembers adds a program's members in one statement.
func writeMembers(ctx context.Context, tx *sqlx.Tx, programID int64, members []string) error {
	if len(members) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO observing_program_members (program_id, username) SELECT $1, unnest($2::text[])`, programID, pq.Array(members))
	return err
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// checkUnitRefs answers 422 naming the first obs unit whose source or instrument module does not exist.
func checkUnitRefs(ctx context.Context, tx *sqlx.Tx, units []catalog.ObsUnitSpec) error {
	if len(units) == 0 {
		return nil
	}
	srcIDs := make([]int64, len(units))
	modIDs := make([]int64, len(units))
	for i, u := range units {
		srcIDs[i], modIDs[i] = u.SourceID, int64(u.InstrumentModuleID)
	}
	var found []int64
	// FOR KEY SHARE: a source cannot be deleted between this check and the insert.
	if err := tx.SelectContext(ctx, &found, `SELECT id FROM sources WHERE id = ANY($1) FOR KEY SHARE`, pq.Array(srcIDs)); err != nil {
		return err
	}
	have := map[int64]bool{}
	for _, id := range found {
		have[id] = true
	}
	for i, u := range units {
		if !have[u.SourceID] {
			return problem.Field(fmt.Sprintf("body.obs_units[%d].source_id", i), "no source with this id", u.SourceID)
		}
	}
	found = found[:0]
	if err := tx.SelectContext(ctx, &found, `SELECT id FROM instrument_modules WHERE id = ANY($1)`, pq.Array(modIDs)); err != nil {
		return err
	}
	have = map[int64]bool{}
	for _, id := range found {
		have[id] = true
	}
	for i, u := range units {
		if !have[int64(u.InstrumentModuleID)] {
			return problem.Field(fmt.Sprintf("body.obs_units[%d].instrument_module_id", i), "no instrument module with this id (see GET /instruments/)", u.InstrumentModuleID)
		}
	}
	return nil
}

// upsertUnits writes a program's units in one statement; a unit whose name exists keeps its id.
func upsertUnits(ctx context.Context, tx *sqlx.Tx, programID int64, units []catalog.ObsUnitSpec) error {
	if len(units) == 0 {
		return nil
	}
	b, err := json.Marshal(units)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, min_elevation_deg, priority,
			max_airmass, min_moon_separation_deg, min_sun_separation_deg, max_pwv_mm, lst_start_hours, lst_end_hours, time_windows)
		SELECT $1, x.name, x.source_id, x.instrument_module_id, x.duration_s, x.min_elevation_deg, x.priority,
			x.max_airmass, x.min_moon_separation_deg, x.min_sun_separation_deg, x.max_pwv_mm,
			(x.lst_range->>'start_hours')::double precision, (x.lst_range->>'end_hours')::double precision,
			(SELECT range_agg(tstzrange((w->>'start')::timestamptz, (w->>'end')::timestamptz)) FROM jsonb_array_elements(x.time_windows) w)
		FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (name text, source_id bigint, instrument_module_id integer,
			duration_s double precision, min_elevation_deg double precision, priority integer,
			max_airmass double precision, min_moon_separation_deg double precision, min_sun_separation_deg double precision,
			max_pwv_mm double precision, lst_range jsonb, time_windows jsonb))
			WITH ORDINALITY AS x(name, source_id, instrument_module_id, duration_s, min_elevation_deg, priority,
				max_airmass, min_moon_separation_deg, min_sun_separation_deg, max_pwv_mm, lst_range, time_windows, ord)
		ORDER BY x.ord
		ON CONFLICT (program_id, name) DO UPDATE SET source_id = EXCLUDED.source_id,
			instrument_module_id = EXCLUDED.instrument_module_id, duration_s = EXCLUDED.duration_s,
			min_elevation_deg = EXCLUDED.min_elevation_deg, priority = EXCLUDED.priority,
			max_airmass = EXCLUDED.max_airmass, min_moon_separation_deg = EXCLUDED.min_moon_separation_deg,
			min_sun_separation_deg = EXCLUDED.min_sun_separation_deg, max_pwv_mm = EXCLUDED.max_pwv_mm,
			lst_start_hours = EXCLUDED.lst_start_hours, lst_end_hours = EXCLUDED.lst_end_hours,
			time_windows = EXCLUDED.time_windows`, programID, string(b))
	if code, _ := pqCode(err); code == foreignKeyViolation {
		return &catalog.ConflictError{Location: "body.obs_units", Message: "a source or instrument module of the obs units was deleted meanwhile; retry"}
	}
	return err
}

// ObsUnit returns one obs unit, or an error wrapping problem.ErrNotFound.
func (s *Store) ObsUnit(ctx context.Context, id int64) (catalog.ObsUnit, error) {
	var r obsUnitRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+obsUnitColumns+` FROM obs_units u JOIN sources s ON s.id = u.source_id WHERE u.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return catalog.ObsUnit{}, fmt.Errorf("no obs unit with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return catalog.ObsUnit{}, err
	}
	return r.unit(), nil
}
