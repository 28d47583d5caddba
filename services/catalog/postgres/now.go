package postgres

// The reads of time accounting and of the "now" ranking (catalog accounting.go, now.go).

import (
	"context"
	"fmt"

	"github.com/lib/pq"

	"github.com/obsops/obsops/services/catalog"
)

// Executed time, the same in both reads: the executions counted (completed ones have both times
// by ingest's rule; the filter keeps a bad row from counting as nothing or as a negative time) and
// their sum and count per obs unit (executed_obs_units aliased e).
const (
	countedExecution    = `e.status = 'completed' AND e.start_time IS NOT NULL AND e.end_time >= e.start_time`
	executedTimeColumns = `sum(extract(epoch FROM e.end_time - e.start_time))::double precision AS seconds, count(*) AS completed`
)

// ExecutedTime sums the completed executions of obs units committed to ingest's
// executed_obs_units (a SELECT grant, migrations/grants/catalog.sql), by obs unit id.
func (s *Store) ExecutedTime(ctx context.Context, obsUnitIDs []int64) (map[int64]catalog.ExecutedTime, error) {
	out := make(map[int64]catalog.ExecutedTime, len(obsUnitIDs))
	if len(obsUnitIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		ObsUnitID int64   `db:"obs_unit_id"`
		Seconds   float64 `db:"seconds"`
		Completed int     `db:"completed"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT e.obs_unit_id, `+executedTimeColumns+`
		FROM executed_obs_units e
		WHERE e.obs_unit_id = ANY($1) AND `+countedExecution+`
		GROUP BY e.obs_unit_id`, pq.Array(obsUnitIDs)); err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.ObsUnitID] = catalog.ExecutedTime{Seconds: r.Seconds, Completed: r.Completed}
	}
	return out, nil
}

// ActiveObsUnits reads every obs unit of the active programs with its program, its source's engine
// columns and its executed time, by obs unit id: one query, scanned by hand (2,000 rows through
// sqlx's reflection cost more than the query itself: TestBenchVisibilityNow).
func (s *Store) ActiveObsUnits(ctx context.Context) ([]catalog.ActiveObsUnit, error) {
	rows, err := s.DB.QueryContext(ctx, `
		SELECT `+obsUnitColumns+`, p.short_name AS program_short_name, p.allocated_hours,
			s.kind, s.ra_deg, s.dec_deg, s.pm_ra_mas_yr, s.pm_dec_mas_yr, s.epoch, s.body, s.elevation_deg, s.az_min_deg, s.az_max_deg,
			coalesce(x.seconds, 0) AS executed_s, coalesce(x.completed, 0) AS completed
		FROM obs_units u JOIN observing_programs p ON p.id = u.program_id JOIN sources s ON s.id = u.source_id
		LEFT JOIN (
			SELECT e.obs_unit_id, `+executedTimeColumns+`
			FROM executed_obs_units e JOIN obs_units eu ON eu.id = e.obs_unit_id JOIN observing_programs ep ON ep.id = eu.program_id
			WHERE ep.status = 'active' AND `+countedExecution+`
			GROUP BY e.obs_unit_id) x ON x.obs_unit_id = u.id
		WHERE p.status = 'active' ORDER BY u.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []catalog.ActiveObsUnit
	var r activeRow
	dest := make([]any, len(cols))
	for i, c := range cols {
		if dest[i] = r.dest(c); dest[i] == nil {
			return nil, fmt.Errorf("active obs units: no field for column %q", c)
		}
	}
	for rows.Next() {
		r = activeRow{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, catalog.ActiveObsUnit{Unit: r.unit.unit(), ProgramID: r.unit.ProgramID, ProgramShortName: r.programShortName,
			AllocatedHours: r.allocatedHours, Source: r.src.source().Source,
			Executed: catalog.ExecutedTime{Seconds: r.executedS, Completed: r.completed}})
	}
	return out, rows.Err()
}

// activeRow is one row of ActiveObsUnits.
type activeRow struct {
	unit             obsUnitRow
	programShortName string
	allocatedHours   *float64
	src              engineSourceRow
	executedS        float64
	completed        int
}

// dest is where column c is scanned (nil: no such column): the obs unit's columns (obsUnitColumns)
// by their names, then the program's, the source's and the executed time.
func (r *activeRow) dest(c string) any {
	u := &r.unit
	switch c {
	case "id":
		return &u.ID
	case "program_id":
		return &u.ProgramID
	case "name":
		return &u.Name
	case "source_id":
		return &u.SourceID
	case "source_name":
		return &u.SourceName
	case "instrument_module_id":
		return &u.InstrumentModuleID
	case "duration_s":
		return &u.DurationS
	case "min_elevation_deg":
		return &u.MinElevationDeg
	case "priority":
		return &u.Priority
	case "max_airmass":
		return &u.MaxAirmass
	case "min_moon_separation_deg":
		return &u.MinMoonSeparationDeg
	case "min_sun_separation_deg":
		return &u.MinSunSeparationDeg
	case "max_pwv_mm":
		return &u.MaxPWVmm
	case "lst_start_hours":
		return &u.LSTStartHours
	case "lst_end_hours":
		return &u.LSTEndHours
	case "time_windows":
		return &u.TimeWindows
	case "program_short_name":
		return &r.programShortName
	case "allocated_hours":
		return &r.allocatedHours
	case "kind":
		return &r.src.Kind
	case "ra_deg":
		return &r.src.RA
	case "dec_deg":
		return &r.src.Dec
	case "pm_ra_mas_yr":
		return &r.src.PMRA
	case "pm_dec_mas_yr":
		return &r.src.PMDec
	case "epoch":
		return &r.src.Epoch
	case "body":
		return &r.src.Body
	case "elevation_deg":
		return &r.src.Elev
	case "az_min_deg":
		return &r.src.AzMin
	case "az_max_deg":
		return &r.src.AzMax
	case "executed_s":
		return &r.executedS
	case "completed":
		return &r.completed
	}
	return nil
}
