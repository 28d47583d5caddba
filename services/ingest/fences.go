package ingest

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
)

// Obs-unit fences: the ingest side of deleting obs units (issue 23, rule 4: an acknowledged
// write is never refused later by an ordinary action). The catalog fences the obs units it is
// about to delete; a start of a fenced obs unit is refused when it is held (409 while the delete
// decides, 422 once it deleted the obs unit), and the fence answers, atomically with setting it,
// the buffered executions that reference them, which make the catalog refuse the delete. See
// pkg/contract (fences.go) and docs/decisions.md, "Deleting obs units: a fence in the ingest
// buffer".

// FenceTTL is how long a fence lives unless sealed: longer than the catalog's bound on its
// delete transaction (catalog.DeleteTimeout), so a fence never expires under a delete that is
// still deciding; a delete that outlives it fails to seal and changes nothing.
const FenceTTL = 30 * time.Second

// FenceValue is the value of a delete's fence keys while it decides.
func FenceValue(token string) string { return "fence:" + token }

// TombstoneValue is the value of a delete's fence keys once it deleted the obs units.
func TombstoneValue(token string) string { return "deleted:" + token }

// ErrFenceLost is a seal whose fences are no longer the delete's own (expired, or taken by
// another delete): the delete must not commit.
var ErrFenceLost = errors.New("the obs units' fences were lost (expired or taken by another delete); retry the delete")

// FencedError is a write refused by the hold script because one of its Write.Fences exists.
type FencedError struct {
	Value string // the fence key's value: FenceValue or TombstoneValue
}

func (e *FencedError) Error() string { return "fenced: " + e.Value }

// Deleted reports whether the fence is a tombstone (the obs unit was deleted).
func (e *FencedError) Deleted() bool { return strings.HasPrefix(e.Value, "deleted:") }

// startFenced is the answer to a start refused by its obs unit's fence: 409 while a delete
// decides (retry: the delete is refused, or the obs unit is gone), 422 once it is deleted.
func startFenced(fe *FencedError, obsUnit int64) error {
	if fe.Deleted() {
		return problem.Field("body.obs_unit_id", "no such obs unit (deleted)", obsUnit)
	}
	return &ConflictError{Msg: "obs unit " + strconv.FormatInt(obsUnit, 10) + " is being deleted; retry shortly", RetryAfter: 1}
}

// internalOnly refuses a caller that did not present the suite's internal secret.
func internalOnly(trusted bool) error {
	if !trusted {
		return problem.Forbidden.New("an internal route: only obsops services (with OPS_INTERNAL_SECRET) may call it")
	}
	return nil
}

// FenceObsUnits fences obs units for the catalog's delete req.Token and answers their buffered
// executions (trusted: the caller presented the internal secret).
func (s *Service) FenceObsUnits(ctx context.Context, trusted bool, req contract.FenceRequest) (contract.FenceAnswer, error) {
	if err := internalOnly(trusted); err != nil {
		return contract.FenceAnswer{}, err
	}
	byUnit, err := s.Buffer.FenceObsUnits(ctx, req.Token, req.ObsUnitIDs)
	if err != nil {
		return contract.FenceAnswer{}, s.readErr(err)
	}
	out := contract.FenceAnswer{Executions: []contract.FencedExecution{}}
	for ou, ids := range byUnit {
		for _, id := range ids {
			out.Executions = append(out.Executions, contract.FencedExecution{ID: id, ObsUnitID: ou})
		}
	}
	sort.Slice(out.Executions, func(i, j int) bool {
		a, b := out.Executions[i], out.Executions[j]
		return a.ObsUnitID < b.ObsUnitID || (a.ObsUnitID == b.ObsUnitID && a.ID < b.ID)
	})
	return out, nil
}

// SealObsUnits turns the delete's fences into tombstones: 409 if one was lost.
func (s *Service) SealObsUnits(ctx context.Context, trusted bool, req contract.FenceRequest) error {
	if err := internalOnly(trusted); err != nil {
		return err
	}
	err := s.Buffer.SealObsUnits(ctx, req.Token, req.ObsUnitIDs)
	switch {
	case errors.Is(err, ErrFenceLost):
		return conflict(err.Error())
	case err != nil:
		return s.readErr(err)
	}
	return nil
}

// ReleaseObsUnits removes the delete's own fences and tombstones.
func (s *Service) ReleaseObsUnits(ctx context.Context, trusted bool, req contract.FenceRequest) error {
	if err := internalOnly(trusted); err != nil {
		return err
	}
	if err := s.Buffer.ReleaseObsUnits(ctx, req.Token, req.ObsUnitIDs); err != nil {
		return s.readErr(err)
	}
	return nil
}
