package transfer

import (
	"time"

	"github.com/google/uuid"
)

// Page is one page of a list: the items, the total across all pages, and the paging asked for.
type Page[T any] struct {
	Items  []T `json:"items"`
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// ListQuery filters and pages a list.
type ListQuery struct {
	State string     // package state or DTP state; "" any
	Site  string     // only those with an operation at this site; "" any
	From  *time.Time // created at or after
	To    *time.Time // created before
	// Execution and Module narrow raw data packages to one execution (executed obs unit) and
	// one instrument module; zero: any. Lists of DTPs ignore them.
	Execution uuid.UUID
	Module    int64
	Limit     int
	Offset    int
}

// ChainStep is one operation of a package's chain as lists show it.
type ChainStep struct {
	ID          int64     `json:"id" db:"id"`
	Kind        Kind      `json:"kind" db:"kind"`
	Status      Status    `json:"status" db:"status"`
	RetryCount  int       `json:"retry_count" db:"retry_count"`
	Site        string    `json:"site" db:"site"`
	Destination *string   `json:"destination_location" db:"destination_location"`
	UpdatedAt   time.Time `json:"updated_at" db:"updated_at"`
	Owner       string    `json:"-" db:"owner"`
}

// RawPackage is a row of GET /raw-packages.
type RawPackage struct {
	ID                    uuid.UUID    `json:"id" db:"raw_data_package_id"`
	Name                  string       `json:"name" db:"name"`
	State                 PackageState `json:"state" db:"state"`
	SizeBytes             int64        `json:"size_bytes" db:"size_bytes"`
	InstrumentModuleID    *int64       `json:"instrument_module_id" db:"instrument_module_id"`
	DataTransferPackageID *int64       `json:"data_transfer_package_id" db:"data_transfer_package_id"`
	FinalizedAt           time.Time    `json:"finalized_at" db:"finalized_at"`
	StateChangedAt        time.Time    `json:"state_changed_at" db:"state_changed_at"`
	CreatedAt             time.Time    `json:"created_at" db:"created_at"`
	Chain                 []ChainStep  `json:"chain" doc:"Its operations: raw_data_package, its DTP's data_transfer_package, transfer and unpack, its long_term_archive and staging, in creation order."`
}

// TransferPackage is a row of GET /transfer-packages.
type TransferPackage struct {
	ID           int64       `json:"id" db:"id"`
	Name         string      `json:"name" db:"name"`
	State        string      `json:"state" db:"state"`
	PackageCount int         `json:"package_count" db:"package_count"`
	SizeBytes    int64       `json:"size_bytes" db:"size_bytes"`
	Location     string      `json:"location" db:"location"`
	CreatedAt    time.Time   `json:"created_at" db:"created_at"`
	UpdatedAt    time.Time   `json:"updated_at" db:"updated_at"`
	Chain        []ChainStep `json:"chain" doc:"Its data_transfer_package, transfer and unpack operations, in creation order."`
}

// HistoryEvent is one entry of an operation's failure history: an attempt, a failure, a reset.
type HistoryEvent struct {
	At         time.Time `json:"at" db:"at"`
	Event      string    `json:"event" db:"event" doc:"created, claimed, completed, failed, retry, stalled or reset."`
	From       *string   `json:"from" db:"from_status"`
	To         string    `json:"to" db:"to_status"`
	Actor      string    `json:"actor" db:"actor" doc:"Username of an admin (reset), the mover's lease holder, or planner."`
	Reason     *string   `json:"reason,omitempty" db:"reason"`
	Attempt    int       `json:"attempt" db:"attempt"`
	RetryCount int       `json:"retry_count" db:"retry_count"`
	ErrorType  *string   `json:"error_type,omitempty" db:"error_type"`
	Message    *string   `json:"message,omitempty" db:"message"`
	Retryable  *bool     `json:"retryable,omitempty" db:"retryable"`
	LogPath    *string   `json:"log_path,omitempty" db:"log_path"`
}

// FailureHistory is the durable failure trail of one operation.
type FailureHistory struct {
	OperationID   int64          `json:"operation_id"`
	OperationType Kind           `json:"operation_type"`
	CurrentStatus Status         `json:"current_status"`
	RetryCount    int            `json:"retry_count"`
	MaxRetries    int            `json:"max_retries"`
	Failures      int            `json:"failures" doc:"Failed attempts recorded (mover reports and stalls)."`
	Events        []HistoryEvent `json:"events" doc:"Every attempt, failure and reset, oldest first."`
	Operation     Operation      `json:"-"` // the operation as it is now
}

// LegacyKind names the two legacy row types with reset shims.
type LegacyKind string

// Legacy row types.
const (
	LegacyDataTransfer    LegacyKind = "data_transfer"
	LegacyLongTermArchive LegacyKind = "long_term_archive"
)

// LegacyReset is the answer of a legacy shim reset of one row.
type LegacyReset struct {
	ID         int64       `json:"id" doc:"The legacy row's id."`
	DryRun     bool        `json:"dry_run"`
	Operations []Operation `json:"operations" doc:"The operation rows behind the legacy row that were reset (or would be, with dry_run)."`
}

// LegacyResetAll is the answer of a legacy reset-all-failed shim.
type LegacyResetAll struct {
	IDs          []int64 `json:"ids" doc:"Legacy rows whose operations were reset (or would be, with dry_run)."`
	Count        int     `json:"count"`
	DryRun       bool    `json:"dry_run"`
	OperationIDs []int64 `json:"operation_ids" doc:"The operation rows reset."`
}

// StagingJob is a staging request and its operations.
type StagingJob struct {
	ID          int64       `json:"id"`
	RequestedBy string      `json:"requested_by"`
	Destination string      `json:"destination_location"`
	Operations  []Operation `json:"operations"`
}

// StagingSummary is a staging job as the list of jobs shows it: its operations counted by status.
type StagingSummary struct {
	ID          int64          `json:"id" db:"id"`
	RequestedBy string         `json:"requested_by" db:"requested_by"`
	Destination string         `json:"destination_location" db:"destination"`
	Reason      string         `json:"reason" db:"reason"`
	CreatedAt   time.Time      `json:"created_at" db:"created_at"`
	Open        bool           `json:"open" db:"open" doc:"Some operation is still PENDING or IN_PROGRESS."`
	Operations  map[string]int `json:"operations" doc:"The job's operations by status."`
}

// StagingLimits bound what one user may ask of the staging movers (OPS_STAGING_MAX_PACKAGES,
// OPS_STAGING_MAX_OPEN_JOBS): every package staged is a copy out of a long-term archive.
type StagingLimits struct {
	MaxPackages int // packages in one job
	MaxOpenJobs int // jobs of one user with an operation still PENDING or IN_PROGRESS
}

// StagingRequest asks for archived packages to be staged to Destination (a processing location;
// the first active one when empty).
type StagingRequest struct {
	Packages    []uuid.UUID
	Destination string
	Reason      string
}

// StateChange is one package whose stored state was recomputed: {package_id, from, to}.
type StateChange struct {
	PackageID uuid.UUID    `json:"package_id" db:"id"`
	From      PackageState `json:"from" db:"current"`
	To        PackageState `json:"to" db:"derived"`
}

// ClaimRequest is one mover's claim: up to Max due PENDING operations of Kinds (served in that
// order) at Site (any site when empty), leased to Holder.
type ClaimRequest struct {
	Holder string
	Kinds  []Kind
	Site   string
	Max    int
	// Locations: only operations whose source or destination is one of these data locations
	// (a mover's bindings; empty: none). nil: every location (internal callers).
	Locations []int64
}

// Copy is a physical copy a mover reports having made.
type Copy struct {
	Location string
	Path     string
}

// CompleteRequest is one mover's report of success: operation ID, leased to Holder, wrote Bytes
// (nil: not reported, which CheckCompleteReport refuses) with Checksum and made Copies.
type CompleteRequest struct {
	ID       int64
	Holder   string
	Bytes    *int64
	Checksum string
	Copies   []Copy
	// Locations are the mover's (nil: any): a refused report on an operation outside them is a 404.
	Locations []int64
}

// Failure is a failed attempt as a mover reports it (or the planner, for an expired lease).
type Failure struct {
	ErrorType string
	Message   string
	Retryable bool
	LogPath   string
}

// PhysicalCopy is a copy of a package (or of its DTP) a mover reported making: where it is and
// what was verified of it. VerifiedAt is set when the reported checksum and size matched the
// registered ones (only verified copies count for the replication rule).
type PhysicalCopy struct {
	Site        string     `json:"site" db:"site"`
	Location    string     `json:"location" db:"location"`
	Role        string     `json:"location_role" db:"location_role" doc:"source, buffer, long_term_archive or processing."`
	Path        string     `json:"path" db:"path"`
	Checksum    *string    `json:"checksum" db:"checksum" doc:"As the mover reported it."`
	SizeBytes   *int64     `json:"size_bytes" db:"size_bytes" doc:"As the mover reported it."`
	VerifiedAt  *time.Time `json:"verified_at" db:"verified_at" doc:"When the report matched the registered checksum and size; null: not verified."`
	OperationID *int64     `json:"operation_id" db:"operation_id" doc:"The operation that made it."`
	DTP         *int64     `json:"data_transfer_package_id" db:"data_transfer_package_id" doc:"Set for a copy of the package's DTP."`
	CreatedAt   time.Time  `json:"created_at" db:"created_at"`
}

// RawPackageDetail is GET /raw-packages/{id}: the package as the list shows it (its state and
// chain), its registered checksum and its physical copies.
type RawPackageDetail struct {
	RawPackage
	Checksum *string        `json:"checksum" doc:"The checksum registered for the package (ingest's finalize): what its archive copies are verified against."`
	Copies   []PhysicalCopy `json:"physical_copies" doc:"Copies of the package and of its DTP, oldest first."`
}

// OperationDetail is GET /operation/{kind}/{id}: the operation with its history and failures.
type OperationDetail struct {
	Operation
	Failures int            `json:"failures" doc:"Failed attempts recorded (mover reports, checksum mismatches and stalls)."`
	History  []HistoryEvent `json:"history" doc:"Every attempt, failure and reset, oldest first."`
}

// OperationQuery filters and pages the list of operations.
type OperationQuery struct {
	Kind   Kind   // "" any
	Status Status // "" any
	Limit  int
	Offset int
}
