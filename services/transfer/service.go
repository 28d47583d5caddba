package transfer

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// Store is what the use cases read and change in the database (postgres.Store implements it).
type Store interface {
	// Counts returns the maintained overview counters and the last published overview seq.
	Counts(ctx context.Context) (map[string]int64, int64, error)
	SiteExists(ctx context.Context, name string) (bool, error)
	RawPackages(ctx context.Context, q ListQuery) (Page[RawPackage], error)
	TransferPackages(ctx context.Context, q ListQuery) (Page[TransferPackage], error)
	FailureHistory(ctx context.Context, kind Kind, id int64) (FailureHistory, error)
	RawPackage(ctx context.Context, id uuid.UUID) (RawPackageDetail, error)
	Operations(ctx context.Context, q OperationQuery) (Page[Operation], error)

	Reset(ctx context.Context, kind Kind, id int64, actor, reason string, dryRun bool) (Operation, error)
	ResetAllFailed(ctx context.Context, kind Kind, actor, reason string, dryRun bool) ([]int64, error)
	ResetLegacy(ctx context.Context, kind LegacyKind, id int64, actor, reason string, dryRun bool) (LegacyReset, error)
	ResetAllLegacy(ctx context.Context, kind LegacyKind, actor, reason string, dryRun bool) (LegacyResetAll, error)

	// CreateStaging records a staging job of actor's unless actor has maxOpen open jobs already
	// (ErrTooManyStagingJobs), decided under a per-user lock so concurrent requests cannot pass.
	CreateStaging(ctx context.Context, actor string, packages []uuid.UUID, destination, reason string, maxOpen int) (StagingJob, error)
	StagingJobByID(ctx context.Context, id int64) (StagingJob, error)
	// StagingJobs lists staging jobs, newest first: actor's, or everyone's when actor is "".
	StagingJobs(ctx context.Context, actor string, limit, offset int) (Page[StagingSummary], error)

	Heartbeat(ctx context.Context, id int64, holder string) (Operation, error)
	Fail(ctx context.Context, id int64, holder string, f Failure) (Operation, error)
	// Operation reads operation id (of kind, unless empty; problem.ErrNotFound).
	Operation(ctx context.Context, kind Kind, id int64) (Operation, error)
}

// Claimer leases operations to movers; postgres.Claimer serves concurrent claims together.
type Claimer interface {
	Claim(ctx context.Context, req ClaimRequest) ([]Operation, error)
}

// Completer records movers' successes; postgres.Completer completes concurrent reports together.
type Completer interface {
	Complete(ctx context.Context, req CompleteRequest) (Operation, error)
}

// Reconciler recomputes stored package states (planner.Reconciler, which owns the inconsistent
// set the sweep fills).
type Reconciler interface {
	ReconcileOne(ctx context.Context, id uuid.UUID) ([]StateChange, error)
	ReconcileInconsistent(ctx context.Context) ([]StateChange, error)
}

// Waker asks the active planner for a round soon, without waiting (planner.Waker).
type Waker interface {
	Wake()
}

// Caller is who performs a use case: a signed-in user or a mover's service account.
type Caller struct {
	Name  string
	Admin bool
	// Service is a service account's kind and bindings (nil for people): a mover's locations.
	Service *authn.ServiceBinding
}

// CallerOf returns the Caller of an authenticated request.
func CallerOf(p *authn.Principal) Caller {
	return Caller{Name: p.Username, Admin: p.IsAdmin(), Service: p.Service}
}

// adminOnly returns AdminRequiredError unless c is an admin.
func (c Caller) adminOnly() error {
	if !c.Admin {
		return AdminRequiredError{}
	}
	return nil
}

// Service is the transfer service's use cases: the reads, the admin actions (resets, reconcile),
// staging requests and the movers' agent API. The HTTP handlers decode a request, call one
// method and encode its answer.
type Service struct {
	Staging    StagingLimits
	Store      Store
	Claimer    Claimer
	Completer  Completer
	Reconciler Reconciler
	Waker      Waker
}

// Overview returns the overview from the maintained counters (constant time at any table size).
func (s *Service) Overview(ctx context.Context) (*Overview, error) {
	counts, seq, err := s.Store.Counts(ctx)
	if err != nil {
		return nil, err
	}
	return BuildOverview(counts, seq, time.Now()), nil
}

// checkList validates a list's filters: to after from, and a site that exists.
func (s *Service) checkList(ctx context.Context, q ListQuery) error {
	if q.From != nil && q.To != nil && !q.To.After(*q.From) {
		return problem.Field("query.to", "must be after from", *q.To)
	}
	if q.Site != "" {
		ok, err := s.Store.SiteExists(ctx, q.Site)
		if err != nil {
			return err
		}
		if !ok {
			return problem.Field("query.site", "no such site", q.Site)
		}
	}
	return nil
}

// RawPackages lists the packages in the pipeline, newest first, each with its chain.
func (s *Service) RawPackages(ctx context.Context, q ListQuery) (Page[RawPackage], error) {
	if err := s.checkList(ctx, q); err != nil {
		return Page[RawPackage]{}, err
	}
	return s.Store.RawPackages(ctx, q)
}

// TransferPackages lists the data transfer packages, newest first, each with its chain.
func (s *Service) TransferPackages(ctx context.Context, q ListQuery) (Page[TransferPackage], error) {
	if err := s.checkList(ctx, q); err != nil {
		return Page[TransferPackage]{}, err
	}
	return s.Store.TransferPackages(ctx, q)
}

// FailureHistory returns the failure trail of operation (kind, id).
func (s *Service) FailureHistory(ctx context.Context, kind Kind, id int64) (FailureHistory, error) {
	return s.Store.FailureHistory(ctx, kind, id)
}

// RawPackage returns one package in the pipeline with its chain and physical copies
// (problem.ErrNotFound for a package that did not enter it).
func (s *Service) RawPackage(ctx context.Context, id uuid.UUID) (RawPackageDetail, error) {
	return s.Store.RawPackage(ctx, id)
}

// Operation returns operation (kind, id) with its history and failures.
func (s *Service) Operation(ctx context.Context, kind Kind, id int64) (OperationDetail, error) {
	h, err := s.Store.FailureHistory(ctx, kind, id)
	if err != nil {
		return OperationDetail{}, err
	}
	return OperationDetail{Operation: h.Operation, Failures: h.Failures, History: h.Events}, nil
}

// Operations lists operations, newest first, of a kind and a status (either may be empty):
// e.g. every FAILED operation, for people and tools.
func (s *Service) Operations(ctx context.Context, q OperationQuery) (Page[Operation], error) {
	return s.Store.Operations(ctx, q)
}

// Reset turns FAILED operation (kind, id) back into PENDING (AfterReset), with the caller and
// reason in its history, and asks the planner for a round; dryRun changes nothing and answers
// what the operation would become. Admins only.
func (s *Service) Reset(ctx context.Context, c Caller, kind Kind, id int64, reason string, dryRun bool) (Operation, error) {
	if err := c.adminOnly(); err != nil {
		return Operation{}, err
	}
	op, err := s.Store.Reset(ctx, kind, id, c.Name, reason, dryRun)
	if err != nil {
		return op, err
	}
	if !dryRun {
		s.Waker.Wake()
	}
	return op, nil
}

// ResetAllFailed resets every FAILED operation of kind in one transaction and returns their ids
// (those it would reset, with dryRun). Admins only.
func (s *Service) ResetAllFailed(ctx context.Context, c Caller, kind Kind, reason string, dryRun bool) ([]int64, error) {
	if err := c.adminOnly(); err != nil {
		return nil, err
	}
	return s.Store.ResetAllFailed(ctx, kind, c.Name, reason, dryRun)
}

// ResetLegacy resets the FAILED operations behind legacy row (kind, id); the legacy row's own
// columns are left as they are. Admins only.
func (s *Service) ResetLegacy(ctx context.Context, c Caller, kind LegacyKind, id int64, reason string, dryRun bool) (LegacyReset, error) {
	if err := c.adminOnly(); err != nil {
		return LegacyReset{}, err
	}
	return s.Store.ResetLegacy(ctx, kind, id, c.Name, reason, dryRun)
}

// ResetAllLegacy resets the FAILED operations behind every legacy row of kind. Admins only.
func (s *Service) ResetAllLegacy(ctx context.Context, c Caller, kind LegacyKind, reason string, dryRun bool) (LegacyResetAll, error) {
	if err := c.adminOnly(); err != nil {
		return LegacyResetAll{}, err
	}
	return s.Store.ResetAllLegacy(ctx, kind, c.Name, reason, dryRun)
}

// Reconcile recomputes package id's stored state and removes it from the inconsistent set; it
// answers the change (none when the state was right). Admins only.
func (s *Service) Reconcile(ctx context.Context, c Caller, id uuid.UUID) ([]StateChange, error) {
	if err := c.adminOnly(); err != nil {
		return nil, err
	}
	return s.Reconciler.ReconcileOne(ctx, id)
}

// ReconcileInconsistent recomputes every package in the inconsistent set and drains it; it
// answers the packages that changed. Admins only.
func (s *Service) ReconcileInconsistent(ctx context.Context, c Caller) ([]StateChange, error) {
	if err := c.adminOnly(); err != nil {
		return nil, err
	}
	return s.Reconciler.ReconcileInconsistent(ctx)
}

// RequestStaging creates a staging job for the caller: one staging operation per ARCHIVED
// package, to the requested processing location, within the caller's StagingLimits.
func (s *Service) RequestStaging(ctx context.Context, c Caller, r StagingRequest) (StagingJob, error) {
	if err := s.Staging.checkPackages(len(r.Packages)); err != nil {
		return StagingJob{}, err
	}
	return s.Store.CreateStaging(ctx, c.Name, r.Packages, r.Destination, r.Reason, s.Staging.MaxOpenJobs)
}

// GetStaging returns staging job id with its operations: the caller's own job (admins: any);
// another user's reads as unknown (404), as if it did not exist.
func (s *Service) GetStaging(ctx context.Context, c Caller, id int64) (StagingJob, error) {
	job, err := s.Store.StagingJobByID(ctx, id)
	if err == nil && !c.Admin && job.RequestedBy != c.Name {
		return StagingJob{}, NotFound("staging job", id)
	}
	return job, err
}

// StagingJobs lists the caller's staging jobs (admins: everyone's), newest first.
func (s *Service) StagingJobs(ctx context.Context, c Caller, limit, offset int) (Page[StagingSummary], error) {
	actor := c.Name
	if c.Admin {
		actor = ""
	}
	return s.Store.StagingJobs(ctx, actor, limit, offset)
}

// Claim leases up to req.Max (default 1) due PENDING operations of req.Kinds to req.Holder,
// each kind once, in the order first given.
func (s *Service) Claim(ctx context.Context, req ClaimRequest) ([]Operation, error) {
	req.Kinds = distinct(req.Kinds)
	if req.Max == 0 {
		req.Max = 1
	}
	return s.Claimer.Claim(ctx, req)
}

// distinct drops the repeats of ks in place, keeping the first of each (at most six kinds: no
// map needed).
func distinct(ks []Kind) []Kind {
	out := ks[:0]
next:
	for _, k := range ks {
		for _, seen := range out {
			if seen == k {
				continue next
			}
		}
		out = append(out, k)
	}
	return out
}

// Heartbeat extends holder's lease of operation id by OPS_OPERATION_LEASE; an operation outside
// locations (nil: any) is not found.
func (s *Service) Heartbeat(ctx context.Context, id int64, holder string, locations []int64) (Operation, error) {
	op, err := s.Store.Heartbeat(ctx, id, holder)
	if err != nil {
		return op, s.outside(ctx, id, locations, err)
	}
	return op, nil
}

// Complete records a mover's success and asks the planner for a round (it creates the next
// operations of the chain). The report must carry the checksum of what was written
// (CheckCompleteReport); a copy counts only when verified: a report that does not match its
// subject's registration (CheckVerified) is recorded as a failure of type checksum_mismatch and
// answered with a *ChecksumMismatchError, never COMPLETED.
func (s *Service) Complete(ctx context.Context, req CompleteRequest) (Operation, error) {
	if err := CheckCompleteReport(req.Checksum, req.Bytes); err != nil {
		return Operation{}, err
	}
	op, err := s.Completer.Complete(ctx, req)
	if err != nil {
		return op, s.outside(ctx, req.ID, req.Locations, err)
	}
	s.Waker.Wake()
	return op, nil
}

// Fail records a mover's failed attempt; RetryPolicy.NextAfterFailure decides what it leads to.
// An operation outside locations (nil: any) is not found.
func (s *Service) Fail(ctx context.Context, id int64, holder string, locations []int64, f Failure) (Operation, error) {
	op, err := s.Store.Fail(ctx, id, holder, f)
	if err != nil {
		return op, s.outside(ctx, id, locations, err)
	}
	return op, nil
}
