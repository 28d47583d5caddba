package catalog

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/problem"
)

// Deleting obs units (issue 23, rule 4: an acknowledged write is never refused later by an
// ordinary action). An obs unit referenced by an execution — committed, or a start still
// buffered in ingest's Redis — is never deleted: deleting its program or a program PUT that
// drops it is refused with a 409 naming the executions (a program that is done is set to status
// archived instead). Committed executions are found by the foreign key of executed_obs_units;
// buffered ones by fencing the obs units in ingest first (Executions): from the fence on, ingest
// refuses new starts of them, and the fence answers, in the same Redis step, the starts held
// before it. The catalog deletes only when there are none, and seals the fences into tombstones
// before it commits, so a start of a deleted obs unit is refused (422), never held and
// dead-lettered. With ingest unreachable nothing is deleted (503). No action of the catalog
// deletes obs units with executions, not even an admin's (docs/operations.md).

// DeleteTimeout bounds a delete of obs units from its fence to its commit. It is well below
// ingest's fence lifetime (30 s, ingest.FenceTTL), so the fences hold for as long as the delete
// decides; a delete slower than its fences fails to seal them and changes nothing.
const DeleteTimeout = 10 * time.Second

// Executions is what the catalog needs of ingest to delete obs units (ingestclient implements
// it with ingest's internal routes, pkg/contract/fences.go). Each call is one delete's, named by
// its token.
type Executions interface {
	// Fence makes ingest refuse new starts of the obs units and returns their buffered
	// executions; ErrIngestUnavailable when ingest cannot be asked.
	Fence(ctx context.Context, token string, obsUnitIDs []int64) ([]ExecutionRef, error)
	// Seal turns the delete's fences into tombstones (starts refused for good); ErrFenceLost
	// when a fence is no longer the delete's own.
	Seal(ctx context.Context, token string, obsUnitIDs []int64) error
	// Release removes the delete's own fences and tombstones.
	Release(ctx context.Context, token string, obsUnitIDs []int64) error
}

// ExecutionRef is an execution of an obs unit that keeps it from being deleted.
type ExecutionRef struct {
	ID        string
	ObsUnitID int64
	Buffered  bool // a start still in ingest's buffer (else a committed row)
}

// ErrIngestUnavailable is an ingest service that could not be asked about the buffered
// executions of obs units: nothing is deleted (503).
var ErrIngestUnavailable = errors.New("the ingest service cannot be asked about buffered executions")

// ErrFenceLost is a delete whose fences in ingest expired or were taken by another delete
// before it could seal them: nothing is deleted (503, retry).
var ErrFenceLost = errors.New("the obs units' fences in ingest were lost before the delete could commit")

// UnavailableError is a delete that could not be decided now (503 with Retry-After): nothing
// was deleted.
type UnavailableError struct{ Err error }

// Error says why.
func (e *UnavailableError) Error() string {
	return e.Err.Error() + "; nothing was deleted, retry later"
}

// Unwrap gives the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// ProblemKind makes it a 503 (problem.Kinded).
func (e *UnavailableError) ProblemKind() problem.Kind { return problem.Unavailable }

// GetHeaders is its Retry-After (huma sends it).
func (e *UnavailableError) GetHeaders() http.Header { return http.Header{"Retry-After": {"2"}} }

// ExecutionsConflictError refuses to delete obs units that executions reference (409): it names
// each execution with its obs unit, and whether it is buffered or committed.
type ExecutionsConflictError struct {
	Location   string // the input that asked for the delete: path.id, body.obs_units
	Executions []ExecutionRef
}

// Error names the executions by obs unit.
func (e *ExecutionsConflictError) Error() string {
	var units []string
	for i, x := range e.Executions {
		if i == 0 || x.ObsUnitID != e.Executions[i-1].ObsUnitID {
			units = append(units, fmt.Sprintf("obs unit %d:", x.ObsUnitID))
		}
		units[len(units)-1] += " " + x.ID + " (" + x.state() + ")"
	}
	return "obs units with executions cannot be deleted (" + strings.Join(units, "; ") +
		"); set the program's status to archived instead"
}

func (x ExecutionRef) state() string {
	if x.Buffered {
		return "buffered"
	}
	return "committed"
}

// ProblemKind makes it a 409 (problem.Kinded).
func (e *ExecutionsConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// Unwrap gives the 409 with one errors[] entry per execution (its id as the value).
func (e *ExecutionsConflictError) Unwrap() error {
	details := make([]problem.Detail, len(e.Executions))
	for i, x := range e.Executions {
		details[i] = problem.Detail{Location: e.Location,
			Message: fmt.Sprintf("obs unit %d has the %s execution %s", x.ObsUnitID, x.state(), x.ID), Value: x.ID}
	}
	return problem.Conflict.New(e.Error(), details...)
}

// sortExecutions orders executions by obs unit, then id (how they are named).
func sortExecutions(xs []ExecutionRef) {
	slices.SortFunc(xs, func(a, b ExecutionRef) int {
		if c := cmp.Compare(a.ObsUnitID, b.ObsUnitID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// DeleteGuard is called by the store inside the transaction that deletes obs units, after the
// delete statements and before the commit, with the ids it deletes: an error rolls it back.
type DeleteGuard func(obsUnitIDs []int64) error

// deletingUnits runs a change (run) that may delete some of the obs units fenced, under their
// fence: it refuses with the buffered (and committed) executions that reference them, gives run
// a guard that seals the fences of the units it deletes — and refuses units it did not fence
// (the program changed meanwhile) —, and releases the fences it did not seal. loc names the
// input that asked for the delete.
func (s *Service) deletingUnits(ctx context.Context, fenced []int64, loc string, run func(ctx context.Context, guard DeleteGuard) error) error {
	ctx, cancel := context.WithTimeout(ctx, DeleteTimeout)
	defer cancel()
	changed := &ConflictError{Location: loc, Message: "the program's obs units changed meanwhile; retry"}
	if len(fenced) == 0 {
		return run(ctx, func(ids []int64) error {
			if len(ids) > 0 {
				return changed
			}
			return nil
		})
	}
	if s.Executions == nil {
		return &UnavailableError{Err: ErrIngestUnavailable}
	}
	token := newToken()
	release := func(ids []int64) {
		if len(ids) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.Executions.Release(rctx, token, ids); err != nil && s.Log != nil {
			// The fences expire by themselves; a tombstone stays (ops runbook).
			s.Log.Warn("could not release obs unit fences in ingest", "obs_units", ids, "err", err)
		}
	}
	buffered, err := s.Executions.Fence(ctx, token, fenced)
	if err != nil {
		release(fenced)
		return &UnavailableError{Err: err}
	}
	if len(buffered) > 0 {
		committed, err := s.Store.ExecutionsOf(ctx, fenced)
		release(fenced)
		if err != nil {
			return err
		}
		all := append(buffered, committed...)
		sortExecutions(all)
		return &ExecutionsConflictError{Location: loc, Executions: all}
	}
	var sealed []int64
	err = run(ctx, func(ids []int64) error {
		for _, id := range ids {
			if !slices.Contains(fenced, id) {
				return changed
			}
		}
		if len(ids) == 0 {
			return nil
		}
		if err := s.Executions.Seal(ctx, token, ids); err != nil {
			return &UnavailableError{Err: err}
		}
		sealed = ids
		return nil
	})
	var ec *ExecutionsConflictError
	if errors.As(err, &ec) {
		ec.Location = loc
	}
	if err != nil {
		release(fenced)
		return err
	}
	var kept []int64
	for _, id := range fenced {
		if !slices.Contains(sealed, id) {
			kept = append(kept, id)
		}
	}
	release(kept)
	return nil
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
