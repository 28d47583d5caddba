package ingest

import (
	"context"
	"errors"
	"sort"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
)

// PendingExecutions answers, for the catalog's time accounting (trusted: the caller presented the
// internal secret), the completed executions of obs units that are acknowledged but not yet
// committed: each unit's executions read as ListExecutions merges them (the database and the
// buffer, a record reading as its least advanced write), keeping those completed and still
// buffered. Dead letters are left out (they will not be applied unless an operator retries them),
// as are obs units that do not exist (deleted meanwhile).
func (s *Service) PendingExecutions(ctx context.Context, trusted bool, req contract.PendingRequest) (contract.PendingAnswer, error) {
	if err := internalOnly(trusted); err != nil {
		return contract.PendingAnswer{}, err
	}
	out := contract.PendingAnswer{Units: []contract.PendingUnit{}}
	seen := map[int64]bool{}
	for _, id := range req.ObsUnitIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		page, err := s.ListExecutions(ctx, id, maxMerged, 0)
		if errors.Is(err, problem.ErrNotFound) {
			continue
		}
		if err != nil {
			return contract.PendingAnswer{}, err
		}
		u := contract.PendingUnit{ObsUnitID: id}
		for _, x := range page.Items {
			if x.BufferStatus == Buffered && x.Status == StatusCompleted && x.StartTime != nil && x.EndTime != nil && !x.EndTime.Before(*x.StartTime) {
				u.Seconds += x.EndTime.Sub(*x.StartTime).Seconds()
				u.Executions++
			}
		}
		if u.Executions > 0 {
			out.Units = append(out.Units, u)
		}
	}
	sort.Slice(out.Units, func(i, j int) bool { return out.Units[i].ObsUnitID < out.Units[j].ObsUnitID })
	return out, nil
}
