package postgres

// The visibility engine's reads of sources: only the columns the ephemerides need, by id, by
// program or all (the visibility routes and the precalculation jobs).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

type engineSourceRow struct {
	ID    int64           `db:"id"`
	Name  string          `db:"name"`
	Kind  string          `db:"kind"`
	RA    sql.NullFloat64 `db:"ra_deg"`
	Dec   sql.NullFloat64 `db:"dec_deg"`
	PMRA  sql.NullFloat64 `db:"pm_ra_mas_yr"`
	PMDec sql.NullFloat64 `db:"pm_dec_mas_yr"`
	Epoch sql.NullFloat64 `db:"epoch"`
	Body  sql.NullString  `db:"body"`
	Elev  sql.NullFloat64 `db:"elevation_deg"`
	AzMin sql.NullFloat64 `db:"az_min_deg"`
	AzMax sql.NullFloat64 `db:"az_max_deg"`
}

func (r *engineSourceRow) source() precalc.Source {
	return precalc.Source{ID: r.ID, Name: r.Name, Source: visibility.Source{
		Kind: r.Kind, RADeg: r.RA.Float64, DecDeg: r.Dec.Float64, PMRAMasYr: r.PMRA.Float64,
		PMDecMasYr: r.PMDec.Float64, Epoch: r.Epoch.Float64, Body: r.Body.String,
		ElevationDeg: r.Elev.Float64, AzMinDeg: r.AzMin.Float64, AzMaxDeg: r.AzMax.Float64,
	}}
}

const engineSourceColumns = `id, name, kind, ra_deg, dec_deg, pm_ra_mas_yr, pm_dec_mas_yr, epoch, body, elevation_deg, az_min_deg, az_max_deg`

// EngineSource reads one source as the visibility engine needs it; an error wrapping
// problem.ErrNotFound if there is none with this id.
func (s *Store) EngineSource(ctx context.Context, id int64) (precalc.Source, error) {
	var r engineSourceRow
	err := s.DB.GetContext(ctx, &r, `SELECT `+engineSourceColumns+` FROM sources WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return precalc.Source{}, fmt.Errorf("no source with id %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return precalc.Source{}, fmt.Errorf("read source %d: %w", id, err)
	}
	return r.source(), nil
}

// EngineSources reads the sources with these ids, in the order given; missing lists
// ids that do not exist.
func (s *Store) EngineSources(ctx context.Context, ids []int64) (found []precalc.Source, missing []int64, err error) {
	var rows []engineSourceRow
	if err := s.DB.SelectContext(ctx, &rows, `SELECT `+engineSourceColumns+` FROM sources WHERE id = ANY($1)`, pq.Array(ids)); err != nil {
		return nil, nil, fmt.Errorf("read sources: %w", err)
	}
	byID := make(map[int64]*engineSourceRow, len(rows))
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	for _, id := range ids {
		if r, ok := byID[id]; ok {
			found = append(found, r.source())
		} else {
			missing = append(missing, id)
		}
	}
	return found, missing, nil
}

// ProgramSourceIDs lists the distinct sources of a program's obs units (by source id);
// problem.ErrNotFound if the program does not exist.
func (s *Store) ProgramSourceIDs(ctx context.Context, programID int64) ([]int64, error) {
	// One query: no row means no program; a program without obs units gives an empty array.
	var ids pq.Int64Array
	err := s.DB.GetContext(ctx, &ids, `
		SELECT ARRAY(SELECT DISTINCT source_id FROM obs_units WHERE program_id = p.id ORDER BY source_id)
		FROM observing_programs p WHERE p.id = $1`, programID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no observing program with id %d: %w", programID, problem.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read program %d sources: %w", programID, err)
	}
	return []int64(ids), nil
}

// ProgramEngineSources reads the distinct sources of a program's obs units, by id, in one query;
// problem.ErrNotFound if the program does not exist.
func (s *Store) ProgramEngineSources(ctx context.Context, programID int64) ([]precalc.Source, error) {
	var rows []engineSourceRow
	err := s.DB.SelectContext(ctx, &rows, `
		SELECT `+engineSourceColumns+` FROM sources
		WHERE id IN (SELECT source_id FROM obs_units WHERE program_id = $1)
		ORDER BY id`, programID)
	if err != nil {
		return nil, fmt.Errorf("read program %d sources: %w", programID, err)
	}
	if len(rows) == 0 {
		// no sources: an empty program, or none at all
		if _, err := s.ProgramSourceIDs(ctx, programID); err != nil {
			return nil, err
		}
	}
	out := make([]precalc.Source, len(rows))
	for i := range rows {
		out[i] = rows[i].source()
	}
	return out, nil
}

// AllSourceIDs lists every source, by id.
func (s *Store) AllSourceIDs(ctx context.Context) ([]int64, error) {
	ids := []int64{}
	if err := s.DB.SelectContext(ctx, &ids, `SELECT id FROM sources ORDER BY id`); err != nil {
		return nil, fmt.Errorf("read source ids: %w", err)
	}
	return ids, nil
}
