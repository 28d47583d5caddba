package httpapi

import (
	"context"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
)

type bodyOutput[T any] struct {
	Body T
}

func out[T any](v T) *bodyOutput[T] { return &bodyOutput[T]{Body: v} }

// caller returns the authenticated caller (401 without one: the access table lets no
// anonymous request through, so this only guards the wiring).
func caller(ctx context.Context) (transfer.Caller, error) {
	p := authn.PrincipalFrom(ctx)
	if p == nil {
		return transfer.Caller{}, huma.Error401Unauthorized("a credential is required")
	}
	return transfer.CallerOf(p), nil
}

// kindParam is an OperationKind in a path; its schema's enum makes huma answer 422 for any
// other value.
type kindParam string

// Schema implements huma.SchemaProvider.
func (kindParam) Schema(huma.Registry) *huma.Schema {
	var names []any
	for _, k := range transfer.Kinds() {
		names = append(names, string(k))
	}
	return &huma.Schema{Type: huma.TypeString, Enum: names, Description: "An OperationKind."}
}

func (h *Handlers) overview(ctx context.Context, _ *struct{}) (*bodyOutput[*transfer.Overview], error) {
	o, err := h.Service.Overview(ctx)
	if err != nil {
		return nil, err
	}
	return out(o), nil
}

// listParams are the paging and filter parameters both lists share.
type listParams struct {
	Limit, Offset int
	Site          string
	From, To      time.Time
}

// query is the ListQuery of the list parameters (the zero time: no bound).
func (in listParams) query(state string) transfer.ListQuery {
	q := transfer.ListQuery{State: state, Site: in.Site, Limit: in.Limit, Offset: in.Offset}
	if !in.From.IsZero() {
		q.From = &in.From
	}
	if !in.To.IsZero() {
		q.To = &in.To
	}
	return q
}

type rawPackagesInput struct {
	Limit  int       `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int       `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	Site   string    `query:"site" maxLength:"63" doc:"Only packages with an operation at this site (e.g. cornell)."`
	From   time.Time `query:"from" doc:"Entered the pipeline at or after (RFC 3339)."`
	To     time.Time `query:"to" doc:"Entered the pipeline before (RFC 3339)."`
	State  string    `query:"state" enum:"WAITING,TRANSFERRING,ARCHIVED,FAILED" doc:"Only packages in this lifecycle state."`
	// Execution and Module: the console's package search.
	Execution string `query:"executed_obs_unit_id" format:"uuid" doc:"Only packages of this execution (executed obs unit id)."`
	Module    int64  `query:"instrument_module_id" minimum:"1" doc:"Only packages of this instrument module (e.g. 11)."`
}

func (h *Handlers) rawPackages(ctx context.Context, in *rawPackagesInput) (*bodyOutput[transfer.Page[transfer.RawPackage]], error) {
	q := listParams{in.Limit, in.Offset, in.Site, in.From, in.To}.query(in.State)
	q.Module = in.Module
	if in.Execution != "" {
		q.Execution = uuid.MustParse(in.Execution) // huma checked the format
	}
	page, err := h.Service.RawPackages(ctx, q)
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

type transferPackagesInput struct {
	Limit  int       `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int       `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	Site   string    `query:"site" maxLength:"63" doc:"Only DTPs with an operation at this site (e.g. cornell)."`
	From   time.Time `query:"from" doc:"Created at or after (RFC 3339)."`
	To     time.Time `query:"to" doc:"Created before (RFC 3339)."`
	State  string    `query:"state" enum:"BUILDING,BUILT,TRANSFERRED,UNPACKED" doc:"Only DTPs in this state."`
}

func (h *Handlers) transferPackages(ctx context.Context, in *transferPackagesInput) (*bodyOutput[transfer.Page[transfer.TransferPackage]], error) {
	page, err := h.Service.TransferPackages(ctx, listParams{in.Limit, in.Offset, in.Site, in.From, in.To}.query(in.State))
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

type rawPackageInput struct {
	ID uuid.UUID `path:"id" doc:"The raw data package's id."`
}

func (h *Handlers) rawPackage(ctx context.Context, in *rawPackageInput) (*bodyOutput[transfer.RawPackageDetail], error) {
	d, err := h.Service.RawPackage(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return out(d), nil
}

type operationInput struct {
	Kind kindParam `path:"kind"`
	ID   int64     `path:"id" minimum:"1"`
}

func (h *Handlers) operation(ctx context.Context, in *operationInput) (*bodyOutput[transfer.OperationDetail], error) {
	d, err := h.Service.Operation(ctx, transfer.Kind(in.Kind), in.ID)
	if err != nil {
		return nil, err
	}
	return out(d), nil
}

type operationsInput struct {
	Limit  int    `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int    `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	Kind   string `query:"kind" enum:"raw_data_package,data_transfer_package,transfer,unpack,long_term_archive,staging" doc:"Only operations of this kind."`
	Status string `query:"status" enum:"PENDING,SCHEDULED,IN_PROGRESS,COMPLETED,FAILED" doc:"Only operations in this status (FAILED: what needs a reset)."`
}

func (h *Handlers) operations(ctx context.Context, in *operationsInput) (*bodyOutput[transfer.Page[transfer.Operation]], error) {
	page, err := h.Service.Operations(ctx, transfer.OperationQuery{Kind: transfer.Kind(in.Kind), Status: transfer.Status(in.Status), Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

type historyInput struct {
	Type kindParam `path:"operation_type"`
	ID   int64     `path:"operation_id" minimum:"1"`
}

func (h *Handlers) failureHistory(ctx context.Context, in *historyInput) (*bodyOutput[transfer.FailureHistory], error) {
	hist, err := h.Service.FailureHistory(ctx, transfer.Kind(in.Type), in.ID)
	if err != nil {
		return nil, err
	}
	return out(hist), nil
}

type resetParams struct {
	DryRun bool   `query:"dry_run" doc:"Change nothing; answer what would be reset."`
	Reason string `query:"reason" maxLength:"1000" doc:"Why; kept in the operation's history with the caller's username."`
}

type resetInput struct {
	Kind   kindParam `path:"kind"`
	ID     int64     `path:"id" minimum:"1"`
	DryRun bool      `query:"dry_run" doc:"Change nothing; answer what the operation would become."`
	Reason string    `query:"reason" maxLength:"1000" doc:"Why; kept in the operation's history with the caller's username."`
}

func (h *Handlers) resetOperation(ctx context.Context, in *resetInput) (*bodyOutput[transfer.Operation], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	op, err := h.Service.Reset(ctx, c, transfer.Kind(in.Kind), in.ID, in.Reason, in.DryRun)
	if err != nil {
		return nil, err
	}
	return out(op), nil
}

// ResetAll is the body of reset-all-failed.
type ResetAll struct {
	IDs    []int64 `json:"ids" doc:"The operations reset (or that would be, with dry_run)."`
	Count  int     `json:"count"`
	DryRun bool    `json:"dry_run"`
}

type resetAllInput struct {
	Kind   kindParam `path:"kind"`
	DryRun bool      `query:"dry_run" doc:"Change nothing; answer what would be reset."`
	Reason string    `query:"reason" maxLength:"1000" doc:"Why; kept in each operation's history with the caller's username."`
}

func (h *Handlers) resetAllFailed(ctx context.Context, in *resetAllInput) (*bodyOutput[ResetAll], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := h.Service.ResetAllFailed(ctx, c, transfer.Kind(in.Kind), in.Reason, in.DryRun)
	if err != nil {
		return nil, err
	}
	return out(ResetAll{IDs: ids, Count: len(ids), DryRun: in.DryRun}), nil
}

type legacyResetInput struct {
	ID     int64  `path:"id" minimum:"1"`
	DryRun bool   `query:"dry_run" doc:"Change nothing; answer what would be reset."`
	Reason string `query:"reason" maxLength:"1000" doc:"Why; kept in the history with the caller's username."`
}

func (h *Handlers) resetLegacy(kind transfer.LegacyKind) func(context.Context, *legacyResetInput) (*bodyOutput[transfer.LegacyReset], error) {
	return func(ctx context.Context, in *legacyResetInput) (*bodyOutput[transfer.LegacyReset], error) {
		c, err := caller(ctx)
		if err != nil {
			return nil, err
		}
		res, err := h.Service.ResetLegacy(ctx, c, kind, in.ID, in.Reason, in.DryRun)
		if err != nil {
			return nil, err
		}
		return out(res), nil
	}
}

func (h *Handlers) resetAllLegacy(kind transfer.LegacyKind) func(context.Context, *resetParams) (*bodyOutput[transfer.LegacyResetAll], error) {
	return func(ctx context.Context, in *resetParams) (*bodyOutput[transfer.LegacyResetAll], error) {
		c, err := caller(ctx)
		if err != nil {
			return nil, err
		}
		res, err := h.Service.ResetAllLegacy(ctx, c, kind, in.Reason, in.DryRun)
		if err != nil {
			return nil, err
		}
		return out(res), nil
	}
}

// Reconciled is the body of the reconcile routes.
type Reconciled struct {
	Changes []transfer.StateChange `json:"changes" doc:"Each package whose stored state changed: {package_id, from, to}."`
	Count   int                    `json:"count"`
}

type packageIDInput struct {
	ID string `path:"id" format:"uuid" doc:"The raw data package's id (UUID)."`
}

func (h *Handlers) reconcileOne(ctx context.Context, in *packageIDInput) (*bodyOutput[Reconciled], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	id, err := uuid.Parse(in.ID)
	if err != nil {
		return nil, problem.Field("path.id", "not a UUID", in.ID)
	}
	changes, err := h.Service.Reconcile(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return out(Reconciled{Changes: changes, Count: len(changes)}), nil
}

func (h *Handlers) reconcileInconsistent(ctx context.Context, _ *struct{}) (*bodyOutput[Reconciled], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	changes, err := h.Service.ReconcileInconsistent(ctx, c)
	if err != nil {
		return nil, err
	}
	return out(Reconciled{Changes: changes, Count: len(changes)}), nil
}

type stagingBody struct {
	RawDataPackageIDs []uuid.UUID `json:"raw_data_package_ids" minItems:"1" maxItems:"1000" doc:"ARCHIVED packages to stage (1-1000)."`
	Destination       string      `json:"destination_location,omitempty" maxLength:"63" doc:"A processing location; default the first active one." example:"cologne-processing"`
	Reason            string      `json:"reason,omitempty" maxLength:"1000"`
}

// stagingCreated is the answer of a staging request: 201 with the job's path in Location.
type stagingCreated struct {
	Location string `header:"Location" doc:"The created staging job: /api/transfer/staging/{id}."`
	Body     transfer.StagingJob
}

func (h *Handlers) requestStaging(ctx context.Context, in *struct{ Body stagingBody }) (*stagingCreated, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	job, err := h.Service.RequestStaging(ctx, c, transfer.StagingRequest{Packages: in.Body.RawDataPackageIDs, Destination: in.Body.Destination, Reason: in.Body.Reason})
	if err != nil {
		return nil, err
	}
	return &stagingCreated{Location: "/api/transfer/staging/" + strconv.FormatInt(job.ID, 10), Body: job}, nil
}

func (h *Handlers) getStaging(ctx context.Context, in *struct {
	ID int64 `path:"id" minimum:"1" doc:"The staging job's id (from the Location of its request)."`
}) (*struct{ Body transfer.StagingJob }, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	job, err := h.Service.GetStaging(ctx, c, in.ID)
	if err != nil {
		return nil, err
	}
	return &struct{ Body transfer.StagingJob }{Body: job}, nil
}

type stagingListInput struct {
	Limit  int `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
}

func (h *Handlers) listStaging(ctx context.Context, in *stagingListInput) (*bodyOutput[transfer.Page[transfer.StagingSummary]], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.Service.StagingJobs(ctx, c, in.Limit, in.Offset)
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

// ---- agent API ----

// kindName is an OperationKind in a body.
type kindName string

// Schema implements huma.SchemaProvider.
func (kindName) Schema(r huma.Registry) *huma.Schema { return kindParam("").Schema(r) }

type claimBody struct {
	Kinds []kindName `json:"kinds" minItems:"1" maxItems:"6" doc:"Operation kinds this mover handles, in order of preference."`
	Site  string     `json:"site,omitempty" maxLength:"63" doc:"Only operations that run at this site (e.g. cornell)."`
	Max   int        `json:"max,omitempty" minimum:"1" maximum:"100" default:"1" doc:"Most operations to lease (1-100)."`
	Agent string     `json:"agent,omitempty" maxLength:"100" doc:"This mover instance's name (e.g. its host); the lease holder is <account>/<agent>. Send the same value with heartbeat, complete and fail."`
}

// Claimed is the body of a claim.
type Claimed struct {
	Items []transfer.Operation `json:"items"`
}

func (h *Handlers) claim(ctx context.Context, in *struct{ Body claimBody }) (*bodyOutput[Claimed], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	locations, err := c.MoverLocations()
	if err != nil {
		return nil, err
	}
	kinds := make([]transfer.Kind, len(in.Body.Kinds))
	for i, k := range in.Body.Kinds {
		kinds[i] = transfer.Kind(k)
	}
	ops, err := h.Service.Claim(ctx, transfer.ClaimRequest{Holder: transfer.Holder(c.Name, in.Body.Agent), Kinds: kinds, Site: in.Body.Site, Max: in.Body.Max, Locations: locations})
	if err != nil {
		return nil, err
	}
	return out(Claimed{Items: ops}), nil
}

type agentBody struct {
	Agent string `json:"agent,omitempty" maxLength:"100" doc:"The agent name sent with the claim."`
}

type heartbeatInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body *agentBody
}

func (h *Handlers) heartbeat(ctx context.Context, in *heartbeatInput) (*bodyOutput[transfer.Operation], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	locations, err := c.MoverLocations()
	if err != nil {
		return nil, err
	}
	agent := ""
	if in.Body != nil {
		agent = in.Body.Agent
	}
	op, err := h.Service.Heartbeat(ctx, in.ID, transfer.Holder(c.Name, agent), locations)
	if err != nil {
		return nil, err
	}
	return out(op), nil
}

type copyBody struct {
	Location string `json:"location" minLength:"1" maxLength:"63" doc:"A data location's name." example:"cornell-archive"`
	Path     string `json:"path" minLength:"1" maxLength:"1024" doc:"Where the copy is, at that location."`
}

type completeBody struct {
	Agent          string     `json:"agent,omitempty" maxLength:"100"`
	Bytes          *int64     `json:"bytes" required:"false" minimum:"0" doc:"Size of what was written, in bytes (required): verified against the registered size."`
	Checksum       string     `json:"checksum" required:"false" maxLength:"200" doc:"Checksum of what was written (required), sha256:<64 hex> or xxh64:<16 hex> in the form of the registration: verified against the package's (long_term_archive, staging) or the DTP's (transfer, unpack); a data_transfer_package operation's registers the DTP's."`
	PhysicalCopies []copyBody `json:"physical_copies,omitempty" maxItems:"1000" doc:"Copies made (a long_term_archive operation: at least the one at its destination)."`
}

type completeInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body completeBody
}

func (h *Handlers) complete(ctx context.Context, in *completeInput) (*bodyOutput[transfer.Operation], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	locations, err := c.MoverLocations()
	if err != nil {
		return nil, err
	}
	copies := make([]transfer.Copy, len(in.Body.PhysicalCopies))
	for i, pc := range in.Body.PhysicalCopies {
		copies[i] = transfer.Copy{Location: pc.Location, Path: pc.Path}
	}
	op, err := h.Service.Complete(ctx, transfer.CompleteRequest{ID: in.ID, Holder: transfer.Holder(c.Name, in.Body.Agent), Bytes: in.Body.Bytes, Checksum: in.Body.Checksum, Copies: copies, Locations: locations})
	if err != nil {
		return nil, err
	}
	return out(op), nil
}

type failBody struct {
	Agent     string `json:"agent,omitempty" maxLength:"100"`
	ErrorType string `json:"error_type" minLength:"1" maxLength:"64" doc:"A short class, e.g. checksum_mismatch, network, disk_full." example:"network"`
	Message   string `json:"message" minLength:"1" maxLength:"4000"`
	Retryable bool   `json:"retryable" doc:"Whether another attempt may succeed."`
	LogPath   string `json:"log_path,omitempty" maxLength:"1024" doc:"Where the mover's log of this attempt is."`
}

type failInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body failBody
}

func (h *Handlers) fail(ctx context.Context, in *failInput) (*bodyOutput[transfer.Operation], error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	locations, err := c.MoverLocations()
	if err != nil {
		return nil, err
	}
	op, err := h.Service.Fail(ctx, in.ID, transfer.Holder(c.Name, in.Body.Agent), locations, transfer.Failure{
		ErrorType: in.Body.ErrorType, Message: in.Body.Message, Retryable: in.Body.Retryable, LogPath: in.Body.LogPath,
	})
	if err != nil {
		return nil, err
	}
	return out(op), nil
}
