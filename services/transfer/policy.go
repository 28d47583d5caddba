package transfer

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/problem"
)

// This file holds the decisions about operations: what a failed attempt, a lease expiry, a reset
// and a mover's report do to an operation, and which completion moves a DTP on. The store
// (postgres) applies them; where a rule must also run inside one SQL statement, the SQL names
// the Go rule it applies and the Go doc names the SQL.

// Backoff is the wait before the next attempt after the n-th retryable failure (n ≥ 1):
// base·2^(n-1), at most max.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// RetryPolicy says what a failed attempt does to an operation: OPS_RETRY_BACKOFF doubling up to
// OPS_RETRY_BACKOFF_MAX between retries, each operation retried up to its own max_retries.
type RetryPolicy struct {
	Backoff, BackoffMax time.Duration
}

// RetryPolicy is the configured retry policy.
func (c *Config) RetryPolicy() RetryPolicy {
	return RetryPolicy{Backoff: c.RetryBackoff, BackoffMax: c.RetryBackoffMax}
}

// AfterFailure is what a failed attempt turns an IN_PROGRESS operation into: its new Status and
// RetryCount, the history Event recorded, and the Wait before it is due again.
type AfterFailure struct {
	Status     Status
	RetryCount int
	Event      string // retry, failed or stalled
	Wait       time.Duration
}

// NextAfterFailure decides the outcome of failure f of operation op: a retryable failure with
// retries left (retry_count < max_retries) puts it back to PENDING with retry_count + 1 after
// the backoff; anything else makes it FAILED until an admin resets it. A stalled failure (an
// expired lease) is recorded as the event stalled whatever it leads to.
func (p RetryPolicy) NextAfterFailure(op Operation, f Failure) AfterFailure {
	a := AfterFailure{Status: StatusFailed, RetryCount: op.RetryCount, Event: "failed"}
	if f.Retryable && op.RetryCount < op.MaxRetries {
		a.Status, a.RetryCount, a.Event = StatusPending, op.RetryCount+1, "retry"
		a.Wait = Backoff(p.Backoff, p.BackoffMax, a.RetryCount)
	}
	if f.ErrorType == ErrorTypeStalled {
		a.Event = "stalled"
	}
	return a
}

// StalledFailure is the failure the planner records for op when its lease expired without a
// heartbeat: retryable, so it goes back to PENDING while retries remain.
func StalledFailure(op Operation) Failure {
	holder := ""
	if op.LeaseHolder != nil {
		holder = *op.LeaseHolder
	}
	var at time.Time
	if op.LeaseExpiresAt != nil {
		at = *op.LeaseExpiresAt
	}
	return Failure{ErrorType: ErrorTypeStalled, Retryable: true,
		Message: fmt.Sprintf("lease of %s expired at %s without a heartbeat", holder, at.UTC().Format(time.RFC3339))}
}

// CheckReport returns the conflict that keeps holder from reporting on op (heartbeat, complete,
// fail): op must be IN_PROGRESS and leased to holder. The batched complete applies the same rule
// inside the SQL function transfer_complete_batch (migrations/functions/transfer_complete_batch.sql,
// outcome conflict), which answers the locked status and holder so that the store can return
// this error for it.
func CheckReport(op Operation, holder string) error {
	if op.Status != StatusInProgress {
		return &StatusConflictError{ID: op.ID, Kind: op.Kind, Current: op.Status, Want: "only an IN_PROGRESS operation can be reported on (claim it first)"}
	}
	if op.LeaseHolder == nil || *op.LeaseHolder != holder {
		h := ""
		if op.LeaseHolder != nil {
			h = *op.LeaseHolder
		}
		return &LeaseConflictError{ID: op.ID, Holder: h}
	}
	return nil
}

// CheckReset returns the conflict that keeps op from being reset: only a FAILED operation can be.
func CheckReset(op Operation) error {
	if op.Status != StatusFailed {
		return &StatusConflictError{ID: op.ID, Kind: op.Kind, Current: op.Status, Want: "only a FAILED operation can be reset"}
	}
	return nil
}

// AfterReset is what a reset turns a FAILED operation into: PENDING and due now, retry_count + 1,
// its lease and last error cleared (its history kept). The store writes the same change for many
// operations in one statement (postgres Store.resetIDs) and answers dry runs with this.
func AfterReset(op Operation) Operation {
	op.Status = StatusPending
	op.RetryCount++
	op.LeaseHolder, op.LeaseExpiresAt, op.LastError, op.LastErrorType = nil, nil, nil, nil
	return op
}

// DTPStateAfter says which DTP state change the completion of an operation of kind k may make:
// a completed data_transfer_package operation makes its DTP BUILT; the last completed transfer
// makes it TRANSFERRED (from BUILT); the last completed unpack, with one unpack per transfer,
// makes it UNPACKED (from TRANSFERRED). ok is false for the kinds that change no DTP. Whether a
// completion is the last is a question for the rows (postgres Store.advance asks it).
func DTPStateAfter(k Kind) (from, to DTPState, ok bool) {
	switch k {
	case KindDataTransferPackage:
		return DTPBuilding, DTPBuilt, true
	case KindTransfer:
		return DTPBuilt, DTPTransferred, true
	case KindUnpack:
		return DTPTransferred, DTPUnpacked, true
	}
	return "", "", false
}

// Holder is the lease holder name of a mover: its account, and /agent when it names its instance.
func Holder(account, agent string) string {
	if agent == "" {
		return account
	}
	return account + "/" + agent
}

// ReadyPackage is a package ready to be grouped into a DTP: its raw_data_package operation Op
// completed at Ready and it belongs to no DTP yet.
type ReadyPackage struct {
	ID    uuid.UUID `db:"id"`
	Op    int64     `db:"op"`
	Size  int64     `db:"size_bytes"`
	Ready time.Time `db:"completed_at"`
}

// Grouping says when ready packages become a data transfer package: once they add up to
// TargetBytes (OPS_DTP_TARGET_BYTES), or once the oldest has waited MaxWait (OPS_DTP_MAX_WAIT).
type Grouping struct {
	TargetBytes int64
	MaxWait     time.Duration
}

// Grouping is the configured grouping rule.
func (c *Config) Grouping() Grouping {
	return Grouping{TargetBytes: c.DTPTargetBytes, MaxWait: c.DTPMaxWait}
}

// Groups splits ready (oldest first) into the DTPs to make at now: a DTP whenever the oldest
// ones add up to TargetBytes, and the rest one DTP once the oldest of them has waited MaxWait
// (otherwise they wait for more).
func (g Grouping) Groups(ready []ReadyPackage, now time.Time) [][]ReadyPackage {
	var groups [][]ReadyPackage
	start := 0
	var size int64
	for i, p := range ready {
		size += p.Size
		if size >= g.TargetBytes {
			groups = append(groups, ready[start:i+1])
			start, size = i+1, 0
		}
	}
	if rest := ready[start:]; len(rest) > 0 && now.Sub(rest[0].Ready) >= g.MaxWait {
		groups = append(groups, rest)
	}
	return groups
}

// ErrorTypeChecksumMismatch is the error_type of a failure recorded because a mover's report of
// what it wrote did not match the registered checksum or size (CheckVerified).
const ErrorTypeChecksumMismatch = "checksum_mismatch"

// validChecksum says whether c has the form ingest registers a package's checksum in
// (sha256:<64 hex> or xxh64:<16 hex>), without regard to case. Written out rather than as a
// regular expression: it runs on every complete of the agent API.
func validChecksum(c string) bool {
	var hex string
	switch {
	case len(c) == 71 && strings.EqualFold(c[:7], "sha256:"):
		hex = c[7:]
	case len(c) == 22 && strings.EqualFold(c[:6], "xxh64:"):
		hex = c[6:]
	default:
		return false
	}
	for i := 0; i < len(hex); i++ {
		switch b := hex[i] | 0x20; { // lower case for letters; digits keep their value
		case b >= '0' && b <= '9' && hex[i] == b, b >= 'a' && b <= 'f':
		default:
			return false
		}
	}
	return true
}

// CheckCompleteReport returns the 422 that keeps a completion from being recorded: every
// completion reports the checksum of what the mover wrote, in the registration's form, and its
// size in bytes. It costs no round trip: the batch path judges the rest.
func CheckCompleteReport(checksum string, bytes *int64) error {
	if bytes == nil {
		return problem.Field("body.bytes", "required: the size of what was written", nil)
	}
	if checksum == "" {
		return problem.Field("body.checksum", "required: the checksum of what was written (sha256:<64 hex> or xxh64:<16 hex>)", checksum)
	}
	if !validChecksum(checksum) {
		return problem.Field("body.checksum", "must be sha256:<64 hex> or xxh64:<16 hex>", checksum)
	}
	return nil
}

// Registration is what a copy is verified against: the checksum and size registered for the
// operation's subject (VerifiedAgainst).
type Registration struct {
	Checksum string
	Bytes    int64
}

// VerifiedAgainst says what a completion of kind k is verified against: "package" (the raw data
// package's checksum and size registered at finalize: long_term_archive and staging), "dtp" (the
// DTP's, registered by the completion of its data_transfer_package operation: transfer and
// unpack) or "" (raw_data_package and data_transfer_package: their reports are recorded, the
// latter as the DTP's registration). The batched complete applies the same table inside
// transfer_complete_batch (migrations/functions/transfer_complete_batch.sql, the lookup g).
func VerifiedAgainst(k Kind) string {
	switch k {
	case KindLongTermArchive, KindStaging:
		return "package"
	case KindTransfer, KindUnpack:
		return "dtp"
	}
	return ""
}

// CheckVerified returns the mismatch that fails a completion of op reporting checksum and bytes
// against its subject's registration reg (nil: nothing registered to compare, e.g. a DTP built
// before registrations were recorded): the checksums differ (ignoring case) or the sizes do. The
// batched complete applies this rule inside transfer_complete_batch (outcome mismatch, answering
// the registration) and the store then records the attempt as MismatchFailure says.
func CheckVerified(op Operation, checksum string, bytes int64, reg *Registration) *ChecksumMismatchError {
	if reg == nil || (strings.EqualFold(checksum, reg.Checksum) && bytes == reg.Bytes) {
		return nil
	}
	return &ChecksumMismatchError{ID: op.ID, Kind: op.Kind, Subject: VerifiedAgainst(op.Kind), Reported: checksum, ReportedBytes: bytes,
		Registered: reg.Checksum, RegisteredBytes: reg.Bytes}
}

// MismatchFailure is the failure recorded for a completion CheckVerified refused: of type
// checksum_mismatch and retryable (another attempt may write a good copy), so the retry policy
// decides as for any failure (NextAfterFailure): PENDING while retries remain, else FAILED.
func MismatchFailure(e *ChecksumMismatchError) Failure {
	return Failure{ErrorType: ErrorTypeChecksumMismatch, Message: e.Mismatch(), Retryable: true}
}

// CheckArchiveCopy returns the 422 that keeps a long_term_archive operation from completing
// without reporting the copy it made at its destination: that copy, verified, is what counts
// for the replication rule. transfer_complete_batch applies it (outcome copy_missing).
func CheckArchiveCopy(op Operation, copies []Copy) error {
	if op.Kind != KindLongTermArchive || op.Destination == nil {
		return nil
	}
	for _, c := range copies {
		if c.Location == *op.Destination {
			return nil
		}
	}
	return problem.Field("body.physical_copies", "a long_term_archive operation reports the copy it made at its destination location "+*op.Destination, len(copies))
}

// Replication is the replication rule a package must meet to be ARCHIVED: verified copies at
// MinCopies long-term archive locations or more (0: one at every active long-term archive
// location), and one at a long-term archive location of each of Sites. The rule itself is
// applied in SQL (transfer_replicated, migrations/functions/transfer_derived_state.sql), where
// every package state is derived; the service stores this in transfer_replication_rule at start.
type Replication struct {
	MinCopies int
	Sites     []string
}

// Replication is the configured replication rule.
func (c *Config) Replication() Replication {
	return Replication{MinCopies: c.ArchiveMinCopies, Sites: c.ArchiveSites}
}

// checkPackages refuses a staging job of more packages than one job may stage (422 naming the
// limit).
func (l StagingLimits) checkPackages(n int) error {
	if l.MaxPackages > 0 && n > l.MaxPackages {
		return problem.Field("body.raw_data_package_ids", fmt.Sprintf("at most %d packages per staging job (OPS_STAGING_MAX_PACKAGES)", l.MaxPackages), n)
	}
	return nil
}

// ErrTooManyStagingJobs refuses a staging job while its requester has OPS_STAGING_MAX_OPEN_JOBS
// open ones (a 429: wait until one is done).
var ErrTooManyStagingJobs error = tooManyStagingJobs{}

type tooManyStagingJobs struct{}

func (tooManyStagingJobs) Error() string {
	return "too many open staging jobs (OPS_STAGING_MAX_OPEN_JOBS): wait until one is done"
}

// ProblemKind makes it a 429.
func (tooManyStagingJobs) ProblemKind() problem.Kind { return problem.RateLimited }
