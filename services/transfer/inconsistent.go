package transfer

import (
	"context"

	"github.com/google/uuid"
)

// InconsistentLister reads the inconsistent set (planner.Reconciler): packages the sweep found
// with a stored state that differs from their derivation, waiting for a reconcile.
type InconsistentLister interface {
	InconsistentPage(ctx context.Context, limit int) ([]uuid.UUID, int64, error)
}

// Inconsistent answers at most limit ids of the inconsistent set and its size. Any user may
// read it (the console's failures page shows it); reconciling is for admins.
func (s *Service) Inconsistent(ctx context.Context, limit int) ([]uuid.UUID, int64, error) {
	l, ok := s.Reconciler.(InconsistentLister)
	if !ok {
		return []uuid.UUID{}, 0, nil
	}
	return l.InconsistentPage(ctx, limit)
}
