package weather

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Store reads and writes the series (table site_weather). Write is the pool writes go to (at a
// secondary site, the main's), Read the local one.
type Store struct {
	Read, Write *sqlx.DB
}

// Insert writes a batch of validated readings in one statement (all or none); a point already
// there (same kind, source, time and run) takes the new value. It returns how many rows were
// written.
func (s *Store) Insert(ctx context.Context, rs []Reading) (int64, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	kinds, sources := make([]string, len(rs)), make([]string, len(rs))
	ats, issued := make([]string, len(rs)), make([]sql.NullString, len(rs))
	pwv := make([]float64, len(rs))
	for i, r := range rs {
		kinds[i], sources[i], ats[i], pwv[i] = r.Kind, r.Source, r.Time.Format(time.RFC3339Nano), r.PWVmm
		if r.IssuedAt != nil {
			issued[i] = sql.NullString{String: r.IssuedAt.Format(time.RFC3339Nano), Valid: true}
		}
	}
	res, err := s.Write.ExecContext(ctx, `
		INSERT INTO site_weather (kind, at, pwv_mm, source, issued_at)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::float8[], $4::text[], $5::timestamptz[])
		ON CONFLICT ON CONSTRAINT site_weather_point DO UPDATE SET pwv_mm = excluded.pwv_mm, created_at = now()`,
		pq.Array(kinds), pq.Array(ats), pq.Array(pwv), pq.Array(sources), pq.Array(issued))
	if err != nil {
		return 0, fmt.Errorf("insert weather: %w", err)
	}
	return res.RowsAffected()
}

// Query selects a page of the series: readings with from <= time < to, optionally of one kind,
// by time then id, after a cursor (the last page's last reading).
type Query struct {
	From, To  time.Time
	Kind      string
	AfterTime *time.Time
	AfterID   int64
	Limit     int
}

// List answers a page (Limit+1 rows read to tell whether there is more).
func (s *Store) List(ctx context.Context, q Query) (items []Reading, more bool, err error) {
	after := q.From.Add(-time.Nanosecond)
	if q.AfterTime != nil {
		after = *q.AfterTime
	}
	err = s.Read.SelectContext(ctx, &items, `
		SELECT id, kind, at, pwv_mm, source, issued_at FROM site_weather
		WHERE at >= $1 AND at < $2 AND ($3 = '' OR kind = $3) AND (at, id) > ($4, $5)
		ORDER BY at, id LIMIT $6`, q.From, q.To, q.Kind, after, q.AfterID, q.Limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("read weather: %w", err)
	}
	if len(items) > q.Limit {
		return items[:q.Limit], true, nil
	}
	return items, false, nil
}

// Load reads what Series needs to answer the PWV over [from, to] as of now: measurements from
// MaxMeasurementAge before from up to min(to, now), and forecast points issued at or before now
// within MaxForecastGap of the range.
func (s *Store) Load(ctx context.Context, from, to, now time.Time) (*Series, error) {
	var rows []Reading
	err := s.Read.SelectContext(ctx, &rows, `
		SELECT id, kind, at, pwv_mm, source, issued_at FROM site_weather
		WHERE (kind = 'measurement' AND at >= $1::timestamptz AND at <= LEAST($2::timestamptz, $3::timestamptz))
		   OR (kind = 'forecast' AND issued_at <= $3::timestamptz AND at >= $4 AND at <= $5)`,
		from.Add(-MaxMeasurementAge), to, now, from.Add(-MaxForecastGap), to.Add(MaxForecastGap))
	if err != nil {
		return nil, fmt.Errorf("read weather: %w", err)
	}
	return NewSeries(rows, now), nil
}

// Prune deletes readings whose time is before cutoff, in batches of batch rows (short
// transactions, no long lock), and returns how many it deleted.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		res, err := s.Write.ExecContext(ctx, `
			DELETE FROM site_weather WHERE id IN (SELECT id FROM site_weather WHERE at < $1 ORDER BY at LIMIT $2)`, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("prune weather: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
