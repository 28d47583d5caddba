package postgres

// The reads of time accounting and of the "now" ranking (catalog accounting.go, now.go).

import (
	"context"

	"github.com/lib/pq"

	"github.com/obsops/obsops/services/catalog"
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
	// completed executions have both times (ingest's rule; the filter keeps a bad row from
	// counting as nothing or as a negative time)
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT obs_unit_id, sum(extract(epoch FROM end_time - start_time))::double precision AS seconds, count(*) AS completed
		FROM executed_obs_units
		WHERE obs_unit_id = ANY($1) AND status = 'completed' AND start_time IS NOT NULL AND end_time >= start_time
		GROUP BY obs_unit_id`, pq.Array(obsUnitIDs)); err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.ObsUnitID] = catalog.ExecutedTime{Seconds: r.Seconds, Completed: r.Completed}
	}
	return out, nil
}

// ActiveObsUnits reads every obs unit of the active programs with its program and its source's
// engine columns, by obs unit id: one query.
func (s *Store) ActiveObsUnits(ctx context.Context) ([]catalog.ActiveObsUnit, error) {
	var rows []struct {
		obsUnitRow
		ProgramShortName string          `db:"program_short_name"`
		AllocatedHours   *float64        `db:"allocated_hours"`
		Src              engineSourceRow `db:"src"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+obsUnitColumns+`, p.short_name AS program_short_name, p.allocated_hours,
			s.id AS "src.id", s.name AS "src.name", s.kind AS "src.kind", s.ra_deg AS "src.ra_deg", s.dec_deg AS "src.dec_deg",
			s.pm_ra_mas_yr AS "src.pm_ra_mas_yr", s.pm_dec_mas_yr AS "src.pm_dec_mas_yr", s.epoch AS "src.epoch", s.body AS "src.body",
			s.elevation_deg AS "src.elevation_deg", s.az_min_deg AS "src.az_min_deg", s.az_max_deg AS "src.az_max_deg"
		FROM obs_units u JOIN observing_programs p ON p.id = u.program_id JOIN sources s ON s.id = u.source_id
		WHERE p.status = 'active' ORDER BY u.id`); err != nil {
		return nil, err
	}
	out := make([]catalog.ActiveObsUnit, len(rows))
	for i := range rows {
		r := &rows[i]
		out[i] = catalog.ActiveObsUnit{Unit: r.unit(), ProgramID: r.ProgramID, ProgramShortName: r.ProgramShortName,
			AllocatedHours: r.AllocatedHours, Source: r.Src.source().Source}
	}
	return out, nil
}
