package planner

import (
	"context"
	"sort"

	"github.com/google/uuid"
)

// InconsistentPage answers at most limit ids of the inconsistent set, sorted, and the set's
// size: what GET /api/transfer/raw-data-package/inconsistent shows. The set is read with SSCAN
// (bounded work per call, whatever its size); its ids are whatever the sweep put there.
func (r *Reconciler) InconsistentPage(ctx context.Context, limit int) ([]uuid.UUID, int64, error) {
	total, err := r.Redis.SCard(ctx, InconsistentSet).Result()
	if err != nil {
		return nil, 0, err
	}
	ids := []uuid.UUID{}
	var cursor uint64
	for len(ids) < limit {
		keys, next, err := r.Redis.SScan(ctx, InconsistentSet, cursor, "", int64(limit)).Result()
		if err != nil {
			return nil, 0, err
		}
		for _, k := range keys {
			if id, err := uuid.Parse(k); err == nil && len(ids) < limit {
				ids = append(ids, id)
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids, total, nil
}
