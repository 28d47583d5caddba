package transfer

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// Movers are their own kind (docs/api.md, "Service accounts"): only a service account of kind
// mover uses the agent API, it is leased only operations whose source or destination is one of
// its bound data locations (the claim statement filters by them), and a report (heartbeat,
// complete, fail) on an operation outside them is answered 404, as if there were none. Its
// kind and locations travel with the verified token (Caller.Service): no lookup per request.

// NotMoverError refuses the agent API to a caller that is not a mover account (403).
type NotMoverError struct{ Kind string }

func (e NotMoverError) Error() string {
	switch e.Kind {
	case "":
		return "only a service account of kind mover uses the agent API; this account has no kind yet (an admin gives it one: PUT /api/tokens/service/{username}/bindings)"
	default:
		article := "a "
		if strings.ContainsRune("aeiou", rune(e.Kind[0])) {
			article = "an "
		}
		return "only a service account of kind mover uses the agent API, not " + article + e.Kind + " account"
	}
}

// ProblemKind makes it a 403.
func (NotMoverError) ProblemKind() problem.Kind { return problem.Forbidden }

// MoverLocations returns the data locations of a mover caller (never nil: a mover bound to
// none is leased nothing), or NotMoverError.
func (c Caller) MoverLocations() ([]int64, error) {
	if c.Service == nil || c.Service.Kind != authn.KindMover {
		kind := "person's"
		if c.Service != nil {
			kind = c.Service.Kind
		}
		return nil, NotMoverError{Kind: kind}
	}
	if c.Service.Locations == nil {
		return []int64{}, nil
	}
	return c.Service.Locations, nil
}

// Within reports whether op's source or destination is one of locations (nil: every location).
func (op Operation) Within(locations []int64) bool {
	if locations == nil {
		return true
	}
	return op.SourceID != nil && slices.Contains(locations, *op.SourceID) ||
		op.DestinationID != nil && slices.Contains(locations, *op.DestinationID)
}

// outside turns a refused report (not IN_PROGRESS, or leased to another holder) on an operation
// outside the mover's locations into a 404: a mover learns nothing of other locations'
// operations. It reads the operation only on that path; a report that succeeds held the lease,
// which only a claim filtered by the mover's locations grants.
func (s *Service) outside(ctx context.Context, id int64, locations []int64, err error) error {
	var lease *LeaseConflictError
	var status *StatusConflictError
	if locations == nil || !errors.As(err, &lease) && !errors.As(err, &status) {
		return err
	}
	op, rerr := s.Store.Operation(ctx, "", id)
	if rerr != nil || op.Within(locations) {
		return err
	}
	return NotFound("operation", id)
}
