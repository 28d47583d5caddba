// Package transfer is the domain of the transfer service: the pipeline of operations that moves
// finalized raw data packages from the observatory to the long-term archives (and on request to a
// processing location), the rules movers and operators drive it by, and the package lifecycle
// derived from it (docs/architecture.md, data model).
//
// The package holds the service's rules and use cases: Service (service.go) is what the HTTP
// handlers call, with the interfaces it needs (Store, Claimer, Completer, Reconciler, Waker)
// implemented by postgres/ and planner/; the decisions about operations (what a failure, a reset
// or a report does) are in policy.go; the shapes the API answers are in model.go.
package transfer

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
)

// Config is the transfer service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr string `env:"OPS_TRANSFER_ADDR" envDefault:"127.0.0.1:8082"`

	// DTPTargetBytes: completed raw data packages are grouped into a data transfer package once
	// they add up to this many bytes; DTPMaxWait: or once the oldest has waited this long.
	DTPTargetBytes int64         `env:"OPS_DTP_TARGET_BYTES" envDefault:"10737418240"`
	DTPMaxWait     time.Duration `env:"OPS_DTP_MAX_WAIT" envDefault:"1h"`
	// OperationLease is how long a claimed operation stays leased to its mover without a
	// heartbeat; then it is a failure of type stalled.
	OperationLease time.Duration `env:"OPS_OPERATION_LEASE" envDefault:"5m"`
	// MaxRetries is max_retries of new operations: retryable failures before FAILED.
	MaxRetries int `env:"OPS_OPERATION_MAX_RETRIES" envDefault:"3"`
	// RetryBackoff is the wait after the first retryable failure, doubled after each further
	// one up to RetryBackoffMax.
	RetryBackoff    time.Duration `env:"OPS_RETRY_BACKOFF" envDefault:"30s"`
	RetryBackoffMax time.Duration `env:"OPS_RETRY_BACKOFF_MAX" envDefault:"30m"`
	// PlannerInterval is how often the active planner looks for work (it is also woken through
	// Redis when a mover completes an operation).
	PlannerInterval time.Duration `env:"OPS_PLANNER_INTERVAL" envDefault:"2s"`
	// SweepInterval is how often the planner compares every package's stored state with its
	// derivation and adds the ones that differ to the inconsistent set.
	SweepInterval time.Duration `env:"OPS_RECONCILE_SWEEP_INTERVAL" envDefault:"1m"`
	// ArchiveMinCopies and ArchiveSites are the replication rule (Replication): a package is
	// ARCHIVED once it has verified copies at ArchiveMinCopies long-term archive locations (0,
	// the default: at every active one) and at a long-term archive location of each site named.
	ArchiveMinCopies int      `env:"OPS_ARCHIVE_MIN_COPIES" envDefault:"0"`
	ArchiveSites     []string `env:"OPS_ARCHIVE_SITES" envSeparator:","`
	// OverviewInterval is the shortest time between two overview updates (WebSocket); at least
	// 100ms (10 updates a second, what the console is measured to keep up with).
	OverviewInterval time.Duration `env:"OPS_OVERVIEW_INTERVAL" envDefault:"250ms"`
	// WSHeartbeat is the WebSocket heartbeat period; WSMaxPerUser the connections one user
	// may hold open at one replica.
	WSHeartbeat  time.Duration `env:"OPS_WS_HEARTBEAT" envDefault:"15s"`
	WSMaxPerUser int           `env:"OPS_WS_MAX_PER_USER" envDefault:"8"`
	// StagingMaxPackages and StagingMaxOpenJobs bound one user's staging requests (StagingLimits).
	StagingMaxPackages int `env:"OPS_STAGING_MAX_PACKAGES" envDefault:"1000"`
	StagingMaxOpenJobs int `env:"OPS_STAGING_MAX_OPEN_JOBS" envDefault:"10"`
}

// Validate checks the transfer settings.
func (c *Config) Validate() error {
	switch {
	case c.StagingMaxPackages < 1 || c.StagingMaxPackages > 1000:
		return &config.Invalid{Var: "OPS_STAGING_MAX_PACKAGES", Reason: "must be within [1, 1000] (a request lists at most 1000)"}
	case c.StagingMaxOpenJobs < 1:
		return &config.Invalid{Var: "OPS_STAGING_MAX_OPEN_JOBS", Reason: "must be at least 1"}
	case c.DTPTargetBytes < 1:
		return &config.Invalid{Var: "OPS_DTP_TARGET_BYTES", Reason: "must be at least 1"}
	case c.DTPMaxWait < 0:
		return &config.Invalid{Var: "OPS_DTP_MAX_WAIT", Reason: "must not be negative"}
	case c.OperationLease < time.Second:
		return &config.Invalid{Var: "OPS_OPERATION_LEASE", Reason: "must be at least 1s"}
	case c.MaxRetries < 0 || c.MaxRetries > 100:
		return &config.Invalid{Var: "OPS_OPERATION_MAX_RETRIES", Reason: "must be within [0, 100]"}
	case c.RetryBackoff < time.Millisecond:
		return &config.Invalid{Var: "OPS_RETRY_BACKOFF", Reason: "must be at least 1ms"}
	case c.RetryBackoffMax < c.RetryBackoff:
		return &config.Invalid{Var: "OPS_RETRY_BACKOFF_MAX", Reason: "must be at least OPS_RETRY_BACKOFF"}
	case c.PlannerInterval < 10*time.Millisecond:
		return &config.Invalid{Var: "OPS_PLANNER_INTERVAL", Reason: "must be at least 10ms"}
	case c.SweepInterval < 100*time.Millisecond:
		return &config.Invalid{Var: "OPS_RECONCILE_SWEEP_INTERVAL", Reason: "must be at least 100ms"}
	case c.OverviewInterval < 100*time.Millisecond:
		return &config.Invalid{Var: "OPS_OVERVIEW_INTERVAL", Reason: "must be at least 100ms (at most 10 updates per second)"}
	case c.WSHeartbeat < 100*time.Millisecond:
		return &config.Invalid{Var: "OPS_WS_HEARTBEAT", Reason: "must be at least 100ms"}
	case c.ArchiveMinCopies < 0 || c.ArchiveMinCopies > 100:
		return &config.Invalid{Var: "OPS_ARCHIVE_MIN_COPIES", Reason: "must be within [0, 100] (0: every active long-term archive location)"}
	case c.WSMaxPerUser < 1:
		return &config.Invalid{Var: "OPS_WS_MAX_PER_USER", Reason: "must be at least 1"}
	}
	return nil
}

// Kind is an OperationKind: what an operation does (docs/api.md lists them).
type Kind string

// The six operation kinds, in pipeline order.
const (
	KindRawDataPackage      Kind = "raw_data_package"
	KindDataTransferPackage Kind = "data_transfer_package"
	KindTransfer            Kind = "transfer"
	KindUnpack              Kind = "unpack"
	KindLongTermArchive     Kind = "long_term_archive"
	KindStaging             Kind = "staging"
)

// Kinds lists every operation kind in pipeline order.
func Kinds() []Kind {
	return []Kind{KindRawDataPackage, KindDataTransferPackage, KindTransfer, KindUnpack, KindLongTermArchive, KindStaging}
}

// Status is an operation's status.
type Status string

// Operation statuses. SCHEDULED is part of the original system's enum and accepted in the
// schema; this pipeline never produces it (a claimed operation is IN_PROGRESS at once, and one
// waiting out its backoff is PENDING with a future next_attempt_at).
const (
	StatusPending    Status = "PENDING"
	StatusScheduled  Status = "SCHEDULED"
	StatusInProgress Status = "IN_PROGRESS"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
)

// Statuses lists every status.
func Statuses() []Status {
	return []Status{StatusPending, StatusScheduled, StatusInProgress, StatusCompleted, StatusFailed}
}

// PackageState is a raw data package's lifecycle state, derived from its operation chain and its
// verified copies (FAILED while any operation of the chain is FAILED; ARCHIVED once the
// replication rule, Replication, is met). The
// rule deriving it is written once, in SQL: the function transfer_derived_state
// (migrations/functions/transfer_derived_state.sql), because every change derives the states of the
// packages it touches inside its own statement (transfer_complete_batch, transfer_make_dtp) or
// transaction (postgres refreshPackages) and the sweep derives thousands at a time. Go never
// derives a state itself; it stores what that function answers.
type PackageState string

// Package lifecycle states.
const (
	StateWaiting      PackageState = "WAITING"
	StateTransferring PackageState = "TRANSFERRING"
	StateArchived     PackageState = "ARCHIVED"
	StateFailed       PackageState = "FAILED"
)

// PackageStates lists every lifecycle state.
func PackageStates() []PackageState {
	return []PackageState{StateWaiting, StateTransferring, StateArchived, StateFailed}
}

// DTPState is a data transfer package's state; DTPStateAfter (policy.go) says which completion
// moves it on.
type DTPState string

// DTP states, in order.
const (
	DTPBuilding    DTPState = "BUILDING"
	DTPBuilt       DTPState = "BUILT"
	DTPTransferred DTPState = "TRANSFERRED"
	DTPUnpacked    DTPState = "UNPACKED"
)

// DTPStates lists every DTP state in order.
func DTPStates() []string {
	return []string{string(DTPBuilding), string(DTPBuilt), string(DTPTransferred), string(DTPUnpacked)}
}

// ErrorTypeStalled is the error_type of a failure recorded because a lease expired.
const ErrorTypeStalled = "stalled"

// StatusConflictError says an operation is not in the status an action needs (answered 409,
// naming the current status).
type StatusConflictError struct {
	ID      int64
	Kind    Kind
	Current Status
	Want    string
}

func (e *StatusConflictError) Error() string {
	return fmt.Sprintf("%s operation %d is %s; %s", e.Kind, e.ID, e.Current, e.Want)
}

// ProblemKind makes it a 409 whose detail is its text.
func (e *StatusConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// LeaseConflictError says a mover acted on an operation leased to another mover.
type LeaseConflictError struct {
	ID     int64
	Holder string
}

func (e *LeaseConflictError) Error() string {
	return fmt.Sprintf("operation %d is leased to %q, not to you", e.ID, e.Holder)
}

// ProblemKind makes it a 409 whose detail is its text.
func (e *LeaseConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// ChecksumMismatchError says a mover's report of what it wrote did not match the registered
// checksum or size of the operation's subject (CheckVerified): the attempt was recorded as a
// failure of type checksum_mismatch and the operation is Now (PENDING for a retry, or FAILED).
// Answered 409: the operation was not completed.
type ChecksumMismatchError struct {
	ID                             int64
	Kind                           Kind
	Subject                        string // package or dtp
	Reported, Registered           string
	ReportedBytes, RegisteredBytes int64
	Now                            Status
}

// Mismatch says what differs (the failure's message).
func (e *ChecksumMismatchError) Mismatch() string {
	return fmt.Sprintf("checksum_mismatch: wrote %s (%d bytes), the %s is registered as %s (%d bytes)",
		e.Reported, e.ReportedBytes, e.Subject, e.Registered, e.RegisteredBytes)
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("%s operation %d not completed: %s; recorded as a failure, the operation is %s", e.Kind, e.ID, e.Mismatch(), e.Now)
}

// ProblemKind makes it a 409 whose detail is its text.
func (e *ChecksumMismatchError) ProblemKind() problem.Kind { return problem.Conflict }

// AdminRequiredError says an action is for admins only (403). The access table refuses
// non-admins before a handler runs; the use cases check again, so no wiring mistake can open a
// reset or reconcile.
type AdminRequiredError struct{}

func (AdminRequiredError) Error() string { return "requires role admin" }

// ProblemKind makes it a 403.
func (AdminRequiredError) ProblemKind() problem.Kind { return problem.Forbidden }

// NotFound returns the error for a missing object: problem.ErrNotFound wrapped with what was
// looked for, which is the 404's detail ("staging job 7: not found").
func NotFound(what string, id any) error {
	return fmt.Errorf("%s %v: %w", what, id, problem.ErrNotFound)
}

// Operation is one operation row as the API shows it.
type Operation struct {
	ID                        int64      `json:"id" db:"id"`
	Kind                      Kind       `json:"kind" db:"kind"`
	Status                    Status     `json:"status" db:"status"`
	RetryCount                int        `json:"retry_count" db:"retry_count"`
	MaxRetries                int        `json:"max_retries" db:"max_retries"`
	Attempt                   int        `json:"attempt" db:"attempt"`
	RawDataPackageID          *uuid.UUID `json:"raw_data_package_id" db:"raw_data_package_id"`
	DataTransferPackageID     *int64     `json:"data_transfer_package_id" db:"data_transfer_package_id"`
	DataTransferID            *int64     `json:"data_transfer_id,omitempty" db:"data_transfer_id"`
	LongTermArchiveTransferID *int64     `json:"long_term_archive_transfer_id,omitempty" db:"long_term_archive_transfer_id"`
	StagingJobID              *int64     `json:"staging_job_id,omitempty" db:"staging_job_id"`
	Site                      string     `json:"site" db:"site"`
	Source                    *string    `json:"source_location" db:"source_location"`
	Destination               *string    `json:"destination_location" db:"destination_location"`
	SourceID                  *int64     `json:"-" db:"source_location_id"`
	DestinationID             *int64     `json:"-" db:"destination_location_id"`
	LeaseHolder               *string    `json:"lease_holder" db:"lease_holder"`
	LeaseExpiresAt            *time.Time `json:"lease_expires_at" db:"lease_expires_at"`
	NextAttemptAt             time.Time  `json:"next_attempt_at" db:"next_attempt_at"`
	LastErrorType             *string    `json:"last_error_type" db:"last_error_type"`
	LastError                 *string    `json:"last_error" db:"last_error"`
	Bytes                     *int64     `json:"bytes" db:"bytes"`
	Checksum                  *string    `json:"checksum" db:"checksum"`
	CreatedAt                 time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt                 time.Time  `json:"updated_at" db:"updated_at"`
	CompletedAt               *time.Time `json:"completed_at" db:"completed_at"`
}

// OverviewChannel is the Redis channel the active planner publishes every overview update on,
// to the hub of every replica.
const OverviewChannel = contract.TransferOverviewChannel

// Message is a WebSocket message: {type: snapshot|update|heartbeat, seq, ...overview}.
type Message struct {
	Type string `json:"type"`
	*Overview
}

// Overview is the body of GET /overview and of every WebSocket snapshot/update.
type Overview struct {
	Funnel      Funnel                    `json:"funnel"`
	Operations  map[Kind]map[Status]int64 `json:"operations" doc:"Per kind, the number of operations in each status."`
	Packages    map[PackageState]int64    `json:"packages" doc:"Raw data packages in the pipeline by lifecycle state."`
	DTPs        map[string]int64          `json:"data_transfer_packages" doc:"Data transfer packages by state."`
	GeneratedAt time.Time                 `json:"generated_at"`
	Seq         int64                     `json:"seq" doc:"Number of the last published change; WebSocket updates carry strictly increasing values."`
}

// Funnel is the uniform funnel from files registered to archived and staged.
type Funnel struct {
	FilesRegistered     int64 `json:"files_registered" doc:"Raw data files registered (exact: a counter kept by a trigger on ingest's raw_data_files)."`
	PackagesRegistered  int64 `json:"packages" doc:"Finalized raw data packages that entered the pipeline."`
	PackagesWaiting     int64 `json:"packages_waiting"`
	PackagesTransfering int64 `json:"packages_transferring"`
	PackagesArchived    int64 `json:"packages_archived"`
	PackagesFailed      int64 `json:"packages_failed"`
	DTPsBuilt           int64 `json:"dtps_built" doc:"Data transfer packages whose build completed."`
	DTPsTransferred     int64 `json:"dtps_transferred" doc:"Data transfer packages transferred to every archive site."`
	DTPsUnpacked        int64 `json:"dtps_unpacked" doc:"Data transfer packages unpacked at every archive site."`
	Archived            int64 `json:"archived" doc:"Packages archived at one or more long-term archive sites."`
	Staged              int64 `json:"staged" doc:"Completed staging operations."`
}

// SameCounts reports whether two overviews hold the same numbers (ignoring time and seq).
func (o *Overview) SameCounts(p *Overview) bool {
	if o == nil || p == nil || o.Funnel != p.Funnel {
		return false
	}
	for _, s := range DTPStates() {
		if o.DTPs[s] != p.DTPs[s] {
			return false
		}
	}
	for _, k := range Kinds() {
		for _, s := range Statuses() {
			if o.Operations[k][s] != p.Operations[k][s] {
				return false
			}
		}
	}
	return true
}

// BuildOverview turns counter values (keys op:<kind>:<status>, pkg:<state>, dtp:<state>,
// files_registered) into the overview.
func BuildOverview(counts map[string]int64, seq int64, now time.Time) *Overview {
	o := &Overview{Operations: map[Kind]map[Status]int64{}, Packages: map[PackageState]int64{}, DTPs: map[string]int64{}, Seq: seq, GeneratedAt: now.UTC()}
	for _, k := range Kinds() {
		o.Operations[k] = map[Status]int64{}
		for _, s := range Statuses() {
			o.Operations[k][s] = counts["op:"+string(k)+":"+string(s)]
		}
	}
	var pkgs int64
	for _, s := range PackageStates() {
		o.Packages[s] = counts["pkg:"+string(s)]
		pkgs += o.Packages[s]
	}
	for _, s := range DTPStates() {
		o.DTPs[s] = counts["dtp:"+s]
	}
	o.Funnel = Funnel{
		FilesRegistered:     counts["files_registered"],
		PackagesRegistered:  pkgs,
		PackagesWaiting:     o.Packages[StateWaiting],
		PackagesTransfering: o.Packages[StateTransferring],
		PackagesArchived:    o.Packages[StateArchived],
		PackagesFailed:      o.Packages[StateFailed],
		DTPsBuilt:           o.DTPs["BUILT"] + o.DTPs["TRANSFERRED"] + o.DTPs["UNPACKED"],
		DTPsTransferred:     o.DTPs["TRANSFERRED"] + o.DTPs["UNPACKED"],
		DTPsUnpacked:        o.DTPs["UNPACKED"],
		Archived:            o.Packages[StateArchived],
		Staged:              o.Operations[KindStaging][StatusCompleted],
	}
	return o
}
