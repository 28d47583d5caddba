package postgres

// The heatmap cache (table visibility_heatmaps): a year's hours observable per day of each
// source, under the key of the coordinates and site settings they were computed with.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// CachedHeatmaps returns the cached hours of the sources for the year whose key matches (keys by source
// id); sources without a current entry are absent from the map.
func (s *Store) CachedHeatmaps(ctx context.Context, year int, keys map[int64]string) (map[int64][]float64, time.Time, error) {
	ids := make([]int64, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	// every row of these sources for the year (normally one each: SaveHeatmaps replaces stale ones),
	// matched against the current keys here
	rows, err := s.DB.QueryContext(ctx, `
		SELECT source_id, constraints_key, hours, computed_at FROM visibility_heatmaps
		WHERE source_id = ANY($2) AND year = $1`, year, pq.Array(ids))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
	}
	defer rows.Close()
	out := make(map[int64][]float64, len(keys))
	var oldest time.Time
	for rows.Next() {
		var id int64
		var key string
		var b []byte
		var at time.Time
		if err := rows.Scan(&id, &key, &b, &at); err != nil {
			return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
		}
		if keys[id] != key {
			continue // computed under other settings or coordinates: stale
		}
		out[id] = decodeHours(b)
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read heatmap cache: %w", err)
	}
	return out, oldest.UTC(), nil
}

// SaveHeatmaps caches heatmap rows in one statement, replacing any entry of the same source and year
// under another key (a stale one). A source deleted meanwhile is skipped.
func (s *Store) SaveHeatmaps(ctx context.Context, year int, entries []precalc.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]int64, len(entries))
	keys := make([]string, len(entries))
	hours := make([][]byte, len(entries))
	for i, e := range entries {
		ids[i], keys[i], hours[i] = e.SourceID, e.Key, encodeHours(e.Hours)
	}
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM visibility_heatmaps WHERE year = $1 AND source_id = ANY($2)`, year, pq.Array(ids)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
		INSERT INTO visibility_heatmaps (source_id, year, constraints_key, hours)
		SELECT e.source_id, $1, e.constraints_key, e.hours
		FROM unnest($2::bigint[], $3::text[], $4::bytea[]) AS e(source_id, constraints_key, hours)
		JOIN sources s ON s.id = e.source_id`, year, pq.Array(ids), pq.Array(keys), pq.Array(hours))
		return err
	})
	if err != nil {
		return fmt.Errorf("save heatmaps: %w", err)
	}
	return nil
}

func encodeHours(h []float64) []byte {
	b := make([]byte, 4*len(h))
	for i, v := range h {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	}
	return b
}

func decodeHours(b []byte) []float64 {
	h := make([]float64, len(b)/4)
	for i := range h {
		h[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return h
}
