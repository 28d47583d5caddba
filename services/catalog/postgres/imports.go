package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/catalog"
)

// ImportSources stores a target list in one transaction of three statements whatever its length:
// one query for the names already taken, one INSERT … SELECT FROM unnest for the sources and one
// for their names and aliases (10,000 rows in well under a second, docs/benchmarks.md). ids are
// in the order of specs. A name taken by a concurrent writer between the check and the insert
// fails the insert on the alias index: a conflict, and nothing is stored.
func (s *Store) ImportSources(ctx context.Context, specs []catalog.SourceSpec, by string, dryRun bool) ([]int64, []catalog.TakenName, error) {
	var keys []string
	var owner []int // owner[k] = the row of keys[k]
	var names []string
	for i, sp := range specs {
		for _, n := range append([]string{sp.Name}, sp.Aliases...) {
			keys = append(keys, catalog.NameKey(n))
			names = append(names, n)
			owner = append(owner, i)
		}
	}
	var ids []int64
	var taken []catalog.TakenName
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		var rows []struct {
			Key    string `db:"alias_key"`
			ID     int64  `db:"id"`
			Source string `db:"name"`
		}
		if err := tx.SelectContext(ctx, &rows, `
			SELECT a.alias_key, s.id, s.name FROM source_aliases a JOIN sources s ON s.id = a.source_id
			WHERE a.alias_key = ANY($1)`, pq.Array(keys)); err != nil {
			return err
		}
		if len(rows) > 0 {
			byKey := make(map[string]int, len(rows))
			for i, r := range rows {
				byKey[r.Key] = i
			}
			seen := map[int]bool{}
			for k, key := range keys {
				if j, ok := byKey[key]; ok && !seen[owner[k]] {
					seen[owner[k]] = true
					taken = append(taken, catalog.TakenName{Index: owner[k], Name: names[k], SourceID: rows[j].ID, Source: rows[j].Source})
				}
			}
			return nil
		}
		if dryRun {
			return nil
		}
		var err error
		ids, err = insertSources(ctx, tx, specs, by)
		if err != nil {
			return err
		}
		aliasOwner := make([]int64, len(owner))
		first := make([]bool, len(owner))
		for k, i := range owner {
			aliasOwner[k] = ids[i]
			first[k] = k == 0 || owner[k-1] != i
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO source_aliases (source_id, alias, is_name)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::boolean[])`,
			pq.Array(aliasOwner), pq.Array(names), pq.Array(first))
		return sourceWriteError(err)
	})
	return ids, taken, err
}

// insertSources inserts the sources in one statement and returns their ids in specs' order
// (matched by name, which is unique).
func insertSources(ctx context.Context, tx *sqlx.Tx, specs []catalog.SourceSpec, by string) ([]int64, error) {
	n := len(specs)
	var (
		name, kind, body, objectType, origin, reference = make([]string, n), make([]string, n), make([]sql.NullString, n), make([]sql.NullString, n), make([]string, n), make([]sql.NullString, n)
		ra, dec, pmRA, pmDec, epoch, plx, rv            = nulls(n), nulls(n), nulls(n), nulls(n), nulls(n), nulls(n), nulls(n)
		elevation, azMin, azMax                         = nulls(n), nulls(n), nulls(n)
	)
	for i, sp := range specs {
		name[i], kind[i], origin[i] = sp.Name, sp.Kind, sp.CoordOrigin
		body[i], objectType[i], reference[i] = nullString(sp.Body), nullString(sp.ObjectType), nullString(sp.CoordReference)
		for _, f := range []struct {
			dst []sql.NullFloat64
			v   *float64
		}{{ra, sp.RADeg}, {dec, sp.DecDeg}, {pmRA, sp.PMRAMasYr}, {pmDec, sp.PMDecMasYr}, {epoch, sp.Epoch},
			{plx, sp.ParallaxMas}, {rv, sp.RadialVelocity}, {elevation, sp.ElevationDeg}, {azMin, sp.AzMinDeg}, {azMax, sp.AzMaxDeg}} {
			if f.v != nil {
				f.dst[i] = sql.NullFloat64{Float64: *f.v, Valid: true}
			}
		}
	}
	var got []struct {
		ID   int64  `db:"id"`
		Name string `db:"name"`
	}
	err := tx.SelectContext(ctx, &got, `
		INSERT INTO sources (name, kind, ra_deg, dec_deg, pm_ra_mas_yr, pm_dec_mas_yr, epoch, parallax_mas, radial_velocity_kms,
			body, elevation_deg, az_min_deg, az_max_deg, object_type, coord_origin, coord_reference, created_by)
		SELECT u.*, NULLIF($17, '') FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::float8[], $6::float8[],
			$7::float8[], $8::float8[], $9::float8[], $10::text[], $11::float8[], $12::float8[], $13::float8[], $14::text[],
			$15::text[], $16::text[]) AS u
		RETURNING id, name`,
		pq.Array(name), pq.Array(kind), pq.Array(ra), pq.Array(dec), pq.Array(pmRA), pq.Array(pmDec), pq.Array(epoch),
		pq.Array(plx), pq.Array(rv), pq.Array(body), pq.Array(elevation), pq.Array(azMin), pq.Array(azMax),
		pq.Array(objectType), pq.Array(origin), pq.Array(reference), by)
	if err != nil {
		return nil, sourceWriteError(err)
	}
	idOf := make(map[string]int64, len(got))
	for _, g := range got {
		idOf[g.Name] = g.ID
	}
	ids := make([]int64, n)
	for i, sp := range specs {
		id, ok := idOf[sp.Name]
		if !ok {
			return nil, fmt.Errorf("import: source %q not returned by its insert", sp.Name)
		}
		ids[i] = id
	}
	return ids, nil
}

func nulls(n int) []sql.NullFloat64 { return make([]sql.NullFloat64, n) }

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}
