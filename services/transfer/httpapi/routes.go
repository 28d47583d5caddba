// Package httpapi is the transfer service's HTTP surface under /api/transfer (docs/api.md): the
// reads, resets and reconcile, staging requests, the movers' agent API and the overview
// WebSocket. Each handler decodes its request, calls one use case of transfer.Service and
// encodes the answer; the errors the use cases return are problems as they are.
package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/live"
)

// Handlers serves the transfer routes.
type Handlers struct {
	Auth    *authn.Authenticator // rules come from the access table, pkg/authn/access.go
	Service *transfer.Service    // the use cases
	Hub     *live.Hub            // the overview WebSocket
}

// Register adds every route of the transfer service: the huma operations on api, the WebSocket
// on app.
func Register(api huma.API, app *fiber.App, h *Handlers) {
	tags := []string{"Transfer"}
	// ---- Reads ----
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "transfer-overview", Method: http.MethodGet, Path: "/api/transfer/overview",
		Summary: "Transfer statistics", Tags: tags,
		Description: "The funnel (files registered; packages waiting, transferring, archived, failed; DTPs built, transferred, " +
			"unpacked; archived; staged), per-kind operation counts by status, generated_at and seq (the last published " +
			"change). Served from maintained counters: constant time at any table size.",
	}), h.overview)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-raw-packages", Method: http.MethodGet, Path: "/api/transfer/raw-packages",
		Summary: "List raw data packages in the pipeline", Tags: tags, Errors: []int{422},
		Description: "Finalized raw data packages that entered the pipeline, newest first, each with its lifecycle state and " +
			"its chain of operations. Filter by state, site (packages with an operation at that site) and entry time.",
	}), h.rawPackages)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-transfer-packages", Method: http.MethodGet, Path: "/api/transfer/transfer-packages",
		Summary: "List data transfer packages", Tags: tags, Errors: []int{422},
		Description: "Data transfer packages, newest first, each with its state and its data_transfer_package, transfer and " +
			"unpack operations. Filter by state, site (with an operation at that site) and creation time.",
	}), h.transferPackages)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-raw-package", Method: http.MethodGet, Path: "/api/transfer/raw-packages/{id}",
		Summary: "One raw data package with its chain and copies", Tags: tags, Errors: []int{404, 422},
		Description: "The package as the list shows it (state, chain of operations), its registered checksum and its physical " +
			"copies (site, location, path, the checksum and size the mover reported, verified_at when they matched the " +
			"registration: only verified copies count for ARCHIVED). 404 for a package not in the pipeline.",
	}), h.rawPackage)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-operation", Method: http.MethodGet, Path: "/api/transfer/operation/{kind}/{id}",
		Summary: "One operation with its history and failures", Tags: tags, Errors: []int{404, 422},
		Description: "The operation (as the agent API answers it) with failures (the number of failed attempts) and history " +
			"(every attempt, failure — error type such as checksum_mismatch, message, log path — and reset, oldest first). " +
			"422 for an unknown kind, 404 for an unknown id or one of another kind.",
	}), h.operation)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-operations", Method: http.MethodGet, Path: "/api/transfer/operations",
		Summary: "List operations by kind and status", Tags: tags, Errors: []int{422},
		Description: "Operations, newest first, filtered by kind and status (e.g. status=FAILED: what needs a reset). total " +
			"comes from the maintained counters (constant time).",
	}), h.operations)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "failure-history", Method: http.MethodGet, Path: "/api/transfer/failure-history/{operation_type}/{operation_id}",
		Summary: "Failure trail of one operation", Tags: tags, Errors: []int{404, 422},
		Description: "current_status, retry_count and every attempt, failure (error type, message, log path) and reset (who, " +
			"when, reason), oldest first. 422 for an unknown operation type, 404 for an unknown id.",
	}), h.failureHistory)

	// ---- Resets and reconcile (admin) ----
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-operation", Method: http.MethodPost, Path: "/api/transfer/operation/{kind}/{id}/reset",
		Summary: "Reset a failed operation", Tags: tags, Errors: []int{404, 409, 422},
		Description: "FAILED → PENDING with retry_count + 1, lease and error cleared, history kept (with the caller and reason). " +
			"Any other status: 409 naming it. dry_run=true changes nothing and answers what the operation would become.",
	}), h.resetOperation)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-all-failed", Method: http.MethodPost, Path: "/api/transfer/operation/{kind}/reset-all-failed",
		Summary: "Reset every failed operation of a kind", Tags: tags, Errors: []int{422},
		Description: "Resets every FAILED operation of the kind as the single reset does, in one transaction; answers {ids, count, dry_run}.",
	}), h.resetAllFailed)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reconcile-package", Method: http.MethodPost, Path: "/api/transfer/raw-data-package/{id}/reconcile",
		Summary: "Recompute one package's state", Tags: tags, Errors: []int{404, 422},
		Description: "Recomputes the package's lifecycle state from its operation chain, stores it and removes the package " +
			"from the inconsistent set; answers each change as {package_id, from, to} (none if it was right).",
	}), h.reconcileOne)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reconcile-inconsistent", Method: http.MethodPost, Path: "/api/transfer/raw-data-package/reconcile-inconsistent",
		Summary: "Reconcile every package in the inconsistent set", Tags: tags,
		Description: "Recomputes every package in the inconsistent set (filled by the periodic sweep) and drains the set; " +
			"answers each package that changed as {package_id, from, to}.",
	}), h.reconcileInconsistent)
	registerInconsistent(api, h, tags)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-data-transfer", Method: http.MethodPost, Path: "/api/transfer/data-transfer/{id}/reset",
		Summary: "Reset a failed transfer (legacy shim)", Tags: tags, Errors: []int{404, 409, 422},
		Description: "Resets the FAILED operation rows behind the legacy data_transfer row (its transfer and unpack " +
			"operations, found by foreign key). The legacy row's own status and counters are not touched. 409 when none is FAILED.",
	}), h.resetLegacy(transfer.LegacyDataTransfer))
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-long-term-archive", Method: http.MethodPost, Path: "/api/transfer/long-term-archive/{id}/reset",
		Summary: "Reset a failed archive transfer (legacy shim)", Tags: tags, Errors: []int{404, 409, 422},
		Description: "Resets the FAILED long_term_archive operation behind the legacy long_term_archive_transfer row. " +
			"The legacy row's own status and counters are not touched.",
	}), h.resetLegacy(transfer.LegacyLongTermArchive))
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-all-data-transfers", Method: http.MethodPost, Path: "/api/transfer/data-transfer/reset-all-failed",
		Summary: "Reset all failed transfers (legacy shim)", Tags: tags,
		Description: "Resets the FAILED operations behind every legacy data_transfer row; answers the legacy ids.",
	}), h.resetAllLegacy(transfer.LegacyDataTransfer))
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "reset-all-long-term-archives", Method: http.MethodPost, Path: "/api/transfer/long-term-archive/reset-all-failed",
		Summary: "Reset all failed archive transfers (legacy shim)", Tags: tags,
		Description: "Resets the FAILED operations behind every legacy long_term_archive_transfer row; answers the legacy ids.",
	}), h.resetAllLegacy(transfer.LegacyLongTermArchive))

	// ---- Staging requests (any user) ----
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "request-staging", Method: http.MethodPost, Path: "/api/transfer/staging",
		Summary: "Stage archived packages to a processing location", Tags: tags, Errors: []int{422}, DefaultStatus: http.StatusCreated,
		Description: "Creates a staging job with one staging operation per ARCHIVED package, copying it from an archive " +
			"location to the processing location (default: the first active one). Answers 201 with the job (its id and " +
			"operations) and its path in Location. 422 names a package that is unknown or not archived.",
	}), h.requestStaging)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-staging", Method: http.MethodGet, Path: "/api/transfer/staging/{id}",
		Summary: "A staging job", Tags: tags, Errors: []int{404},
		Description: "The staging job a request created (its Location): who asked, the destination and its staging " +
			"operations with their current status. Any signed-in user, like the request; 404 for an unknown id.",
	}), h.getStaging)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-staging", Method: http.MethodGet, Path: "/api/transfer/staging",
		Summary: "Your staging jobs", Tags: tags, Errors: []int{422},
		Description: "The caller's staging jobs (an admin's: everyone's), newest first, each with its operations counted by " +
			"status and whether it is still open.",
	}), h.listStaging)

	// ---- Agent API for movers (token of a mover service account with write:data; another kind:
	// 403; only the operations of the mover's bound data locations: movers.go) ----
	agent := []string{"Transfer agent (movers)"}
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "agent-claim", Method: http.MethodPost, Path: "/api/transfer/agent/claim",
		Summary: "Claim operations", Tags: agent, Errors: []int{403, 422},
		Description: "Movers only (a token of a service account of kind mover; any other: 403). Leases up to max due " +
			"PENDING operations of the given kinds (optionally at one site) whose source or destination is one of the " +
			"mover's bound data locations to the caller for " +
			"OPS_OPERATION_LEASE (FOR UPDATE SKIP LOCKED: concurrent movers never get the same operation). They become " +
			"IN_PROGRESS; keep them with heartbeats, end them with complete or fail. An empty items list means no work.",
	}), h.claim)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "agent-heartbeat", Method: http.MethodPost, Path: "/api/transfer/agent/operations/{id}/heartbeat",
		Summary: "Extend a lease", Tags: agent, Errors: []int{403, 404, 409, 422},
		Description: "Extends the caller's lease by OPS_OPERATION_LEASE. Movers only (403); 404 for an operation outside the " +
			"mover's data locations. 409 if the operation is no longer IN_PROGRESS or is " +
			"leased to another mover (e.g. the lease expired and it was claimed again).",
	}), h.heartbeat)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "agent-complete", Method: http.MethodPost, Path: "/api/transfer/agent/operations/{id}/complete",
		Summary: "Report success", Tags: agent, Errors: []int{403, 404, 409, 422},
		Description: "Movers only (403); 404 for an operation outside the mover's data locations. Marks the operation COMPLETED with the size (bytes) and checksum of what was written and the physical " +
			"copies made; the planner then creates the next operations of the chain. Both are required (422 naming the " +
			"field). A long_term_archive, staging, transfer or unpack report is verified against the package's (or DTP's) " +
			"registered checksum and size: a mismatch is recorded as a failure of type checksum_mismatch (retried as the " +
			"retry policy says, else FAILED) and answered 409; the operation is never COMPLETED with it.",
	}), h.complete)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "agent-fail", Method: http.MethodPost, Path: "/api/transfer/agent/operations/{id}/fail",
		Summary: "Report failure", Tags: agent, Errors: []int{403, 404, 409, 422},
		Description: "Movers only (403); 404 for an operation outside the mover's data locations. Records the failed attempt in the failure trail. Retryable and retries left (retry_count < max_retries): " +
			"back to PENDING with retry_count + 1 and exponential backoff (OPS_RETRY_BACKOFF doubling up to " +
			"OPS_RETRY_BACKOFF_MAX); otherwise FAILED until an admin resets it.",
	}), h.fail)

	// ---- WebSocket (outside huma; same access table) ----
	app.Get("/api/transfer/ws/overview", h.Auth.Fiber(authn.RuleFor(http.MethodGet, "/api/transfer/ws/overview")), h.Hub.Admit, h.Hub.Handler())
}
