// Package httpapi is the ingest service's HTTP surface.
package httpapi

import (
	"context"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/ingest"
)

// Handlers serves the ingest routes: each decodes its input, calls the use case of Service and
// encodes the answer.
type Handlers struct {
	Auth    *authn.Authenticator // rules come from the access table, pkg/authn/access.go
	Service *ingest.Service
	// BodyLimit is the body limit of every route but the bulk registration (OPS_BODY_LIMIT_BYTES);
	// BulkBodyLimit that of POST /raw_data_files/bulk.
	BodyLimit, BulkBodyLimit int64
}

// Register adds every route of the ingest API role. Access rules come from the suite's access
// table (pkg/authn/access.go) through Auth.Op.
func Register(api huma.API, h *Handlers) {
	ownership := "\n\nOwnership: an instrument service account writes only the records of the instrument modules it is bound to " +
		"(another module's, or another kind of account: 403 naming the field); packages also admins."
	buffered := func(op huma.Operation, body any, handler func(context.Context, *writeInput) (*writeOutput, error)) {
		op.Tags = append(op.Tags, "Buffered writes")
		op.DefaultStatus = http.StatusCreated
		op.Errors = append(op.Errors, 403, 409, 422, 503)
		if op.MaxBodyBytes == 0 {
			op.MaxBodyBytes = h.BodyLimit
		}
		op.Description += "\n\nBuffered (critical) write: validated in full, then held in Redis (read cache and queue) and answered 201 " +
			"`{id, transaction_id, status: buffered}` with Location; a worker applies it to the main database. 503 with Retry-After " +
			"when Redis cannot durably take it (nothing is held). Idempotency-Key (≤ 255 characters): the same key and body answer the " +
			"original response with `Idempotency-Replayed: true`, another body 409; keys live 24 h." + ownership
		huma.Register(api, h.Auth.Op(op), handler)
		docBody(api, op.Method, op.Path, body)
	}

	// ---- Executed obs units ----
	buffered(huma.Operation{
		OperationID: "start-executed-obs-unit", Method: http.MethodPost, Path: "/executed_obs_units/start",
		Summary: "Start an observation", Tags: []string{"Executed obs units"},
		Description: "Records the start of an execution of a planned obs unit (which must exist, as must the instrument module).",
	}, ingest.StartRequest{}, h.start)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "finish-executed-obs-unit", Method: http.MethodPut, Path: "/executed_obs_units/{id}/finish",
		Summary: "Finish an observation", Tags: []string{"Executed obs units", "Buffered writes"}, DefaultStatus: http.StatusCreated,
		Errors: []int{403, 404, 409, 422, 503}, MaxBodyBytes: h.BodyLimit,
		Description: "Records the end of an execution (started through this API). Finishing again with the same body is a replay; " +
			"with another, 409. Buffered like the start." + ownership,
	}), h.finish)
	docBody(api, http.MethodPut, "/executed_obs_units/{id}/finish", ingest.FinishRequest{})
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-executed-obs-units", Method: http.MethodGet, Path: "/executed_obs_units/{obs_unit_id}",
		Summary: "Executions of a planned obs unit (smart query)", Tags: []string{"Executed obs units"}, Errors: []int{404, 422},
		Description: "Every execution of the planned obs unit, newest start first, merged from the database and the buffer; " +
			"each says where it was read from (buffer_status).",
	}), h.listExecutions)

	// ---- Raw data files ----
	buffered(huma.Operation{
		OperationID: "register-raw-data-file", Method: http.MethodPost, Path: "/raw_data_files/",
		Summary: "Register a raw data file", Tags: []string{"Raw data files"},
		Description: "Registers one file of an executed obs unit (buffered or committed). A package it names must exist and not be complete (else 409).",
	}, ingest.FileRequest{}, h.registerFile)
	buffered(huma.Operation{
		OperationID: "register-raw-data-files-bulk", Method: http.MethodPost, Path: "/raw_data_files/bulk",
		Summary: "Register many raw data files", Tags: []string{"Raw data files"}, MaxBodyBytes: h.BulkBodyLimit,
		Description: "Registers 1–10,000 files, all or nothing: any invalid file refuses the whole request (each error names " +
			"body.files[i].field). Answers `{ids, count, transaction_id, status}`; Location is the transaction's receipt. The body limit " +
			"of this route is OPS_INGEST_BULK_BODY_LIMIT_BYTES (16 MiB).",
	}, ingest.BulkFilesDoc(), h.registerBulk)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "update-raw-data-file", Method: http.MethodPut, Path: "/raw_data_files/{id}",
		Summary: "Update a raw data file", Tags: []string{"Raw data files"}, Errors: []int{403, 404, 409, 422, 503}, MaxBodyBytes: h.BodyLimit,
		Description: "Changes size_bytes, checksum, raw_data_package_id or meta (replaced) of a registered file, directly in the " +
			"database (not buffered; a registration still buffered is applied first). 409 when the file's package, or the one it " +
			"would join, is complete." + ownership,
	}), h.updateFile)
	docBody(api, http.MethodPut, "/raw_data_files/{id}", ingest.FileUpdateRequest{})
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-raw-data-file", Method: http.MethodGet, Path: "/raw_data_files/{id}",
		Summary: "Get a raw data file", Tags: []string{"Raw data files"}, Errors: []int{404, 422},
		Description: "The file, from the database or, while its registration is buffered, from the buffer (buffer_status).",
	}), h.getFile)

	// ---- Raw data packages ----
	buffered(huma.Operation{
		OperationID: "create-raw-data-package", Method: http.MethodPost, Path: "/raw_data_package/",
		Summary: "Create a raw data package", Tags: []string{"Raw data packages"},
		Description: "Creates a package (one tar per executed obs unit and instrument module), status building. file_ids must name registered files.",
	}, ingest.PackageRequest{}, h.createPackage)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-raw-data-package", Method: http.MethodGet, Path: "/raw_data_package/{id}",
		Summary: "Get a raw data package with its files", Tags: []string{"Raw data packages"}, Errors: []int{404, 422},
		Description: "The package and its files (paginated with limit and offset, ordered by path), merged from the database and the buffer.",
	}), h.getPackage)
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "finalize-raw-data-package", Method: http.MethodPut, Path: "/raw_data_package/{id}/finalize",
		Summary: "Mark a package complete", Tags: []string{"Raw data packages"}, Errors: []int{403, 404, 409, 422, 503}, MaxBodyBytes: h.BodyLimit,
		Description: "Sets size_bytes and checksum (and adds file_ids) and makes the package complete: immutable, no file can join " +
			"it, and it enters the transfer pipeline. Not buffered. The same finalize again is a no-op (200); another body 409." + ownership,
	}), h.finalize)
	docBody(api, http.MethodPut, "/raw_data_package/{id}/finalize", ingest.FinalizeRequest{})

	// ---- Receipts ----
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "get-ingest-transaction", Method: http.MethodGet, Path: "/api/ingest/transactions/{transaction_id}",
		Summary: "Receipt of a buffered write", Tags: []string{"Buffered writes"}, Errors: []int{404, 422, 503},
		Description: "Where a buffered write is: buffered, applying, committed (with commit time and WAL position), replicated " +
			"(a secondary site's replica has it), retrying " +
			"(with the last error) or dead (a dead letter). API tokens need read:data or read:observations.",
	}), h.receipt)

	// ---- Internal (never routed by the gateway; only with the internal secret) ----
	// Obs-unit fences for the catalog's deletes (ingest/fences.go, pkg/contract/fences.go).
	huma.Register(api, h.Auth.InternalOp(huma.Operation{
		OperationID: "internal-fence-obs-units", Method: http.MethodPost, Path: contract.ObsUnitFencePath, Hidden: true,
	}), h.fenceObsUnits)
	huma.Register(api, h.Auth.InternalOp(huma.Operation{
		OperationID: "internal-seal-obs-units", Method: http.MethodPost, Path: contract.ObsUnitSealPath, Hidden: true,
		DefaultStatus: http.StatusNoContent,
	}), h.sealObsUnits)
	huma.Register(api, h.Auth.InternalOp(huma.Operation{
		OperationID: "internal-release-obs-units", Method: http.MethodPost, Path: contract.ObsUnitReleasePath, Hidden: true,
		DefaultStatus: http.StatusNoContent,
	}), h.releaseObsUnits)
	// Buffered completed executions for the catalog's time accounting (ingest/pending.go).
	huma.Register(api, h.Auth.InternalOp(huma.Operation{
		OperationID: "internal-pending-obs-units", Method: http.MethodPost, Path: contract.ObsUnitPendingPath, Hidden: true,
	}), h.pendingObsUnits)
}

// docBody documents the JSON body of an operation that reads its body raw.
func docBody(api huma.API, method, path string, body any) {
	item := api.OpenAPI().Paths[path]
	if item == nil {
		return
	}
	var op *huma.Operation
	switch method {
	case http.MethodPost:
		op = item.Post
	case http.MethodPut:
		op = item.Put
	}
	if op == nil || op.RequestBody == nil {
		return
	}
	s := api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(body), true, reflect.TypeOf(body).Name())
	op.RequestBody.Content = map[string]*huma.MediaType{"application/json": {Schema: s}}
	// The handler's decoder refuses a missing body itself, as a 422 naming the body, like every
	// other invalid input (huma would answer 400).
	op.RequestBody.Required = false
}
