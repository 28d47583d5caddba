package httpapi

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/postgres"
)

type bodyOutput[T any] struct {
	Body T
}

func out[T any](v T) *bodyOutput[T] { return &bodyOutput[T]{Body: v} }

// problemOf maps a domain error to its problem; unexpected errors are logged and answered 500
// without their text.
func (h *Handlers) problemOf(ctx context.Context, op string, err error) error {
	var input *transfer.InputError
	var status *transfer.StatusConflictError
	var lease *transfer.LeaseConflictError
	switch {
	case errors.As(err, &input):
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: input.Field, Message: input.Message, Value: input.Value})
	case errors.Is(err, transfer.ErrNotFound):
		return huma.Error404NotFound("no such " + op)
	case errors.As(err, &status):
		return huma.Error409Conflict(status.Error())
	case errors.As(err, &lease):
		return huma.Error409Conflict(lease.Error())
	}
	if h.Log != nil {
		h.Log.ErrorContext(ctx, "transfer request failed", "op", op, "error", err)
	}
	return huma.Error500InternalServerError("internal error; see the transfer log")
}

// caller returns the authenticated principal.
func caller(ctx context.Context) (*authn.Principal, error) {
	p := authn.PrincipalFrom(ctx)
	if p == nil {
		return nil, huma.Error401Unauthorized("a credential is required")
	}
	return p, nil
}

// admin returns the caller if it is an admin: checked here as well as by the access table, so
// no wiring mistake can open a reset or reconcile.
func admin(ctx context.Context) (*authn.Principal, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !p.IsAdmin() {
		return nil, huma.Error403Forbidden("requires role admin")
	}
	return p, nil
}

// kindParam is an OperationKind in a path; its schema's enum makes huma answer 422 for any
// other value (SPEC §4.1 rule).
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
	counts, seq, err := h.Store.Counts(ctx)
	if err != nil {
		return nil, h.problemOf(ctx, "overview", err)
	}
	return out(transfer.BuildOverview(counts, seq, time.Now())), nil
}

// listParams are the paging and filter parameters both lists share.
type listParams struct {
	Limit, Offset int
	Site          string
	From, To      time.Time
}

func (h *Handlers) listQuery(ctx context.Context, in listParams, state string) (postgres.ListQuery, error) {
	q := postgres.ListQuery{State: state, Site: in.Site, Limit: in.Limit, Offset: in.Offset}
	if !in.From.IsZero() {
		q.From = &in.From
	}
	if !in.To.IsZero() {
		q.To = &in.To
	}
	if q.From != nil && q.To != nil && !q.To.After(*q.From) {
		return q, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.to", Message: "must be after from", Value: in.To})
	}
	if in.Site != "" {
		ok, err := h.Store.SiteExists(ctx, in.Site)
		if err != nil {
			return q, h.problemOf(ctx, "site", err)
		}
		if !ok {
			return q, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.site", Message: "no such site", Value: in.Site})
		}
	}
	return q, nil
}

type rawPackagesInput struct {
	Limit  int       `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int       `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	Site   string    `query:"site" maxLength:"63" doc:"Only packages with an operation at this site (e.g. cornell)."`
	From   time.Time `query:"from" doc:"Entered the pipeline at or after (RFC 3339)."`
	To     time.Time `query:"to" doc:"Entered the pipeline before (RFC 3339)."`
	State  string    `query:"state" enum:"WAITING,TRANSFERRING,ARCHIVED,FAILED" doc:"Only packages in this lifecycle state."`
}

func (h *Handlers) rawPackages(ctx context.Context, in *rawPackagesInput) (*bodyOutput[postgres.Page[postgres.RawPackage]], error) {
	q, err := h.listQuery(ctx, listParams{in.Limit, in.Offset, in.Site, in.From, in.To}, in.State)
	if err != nil {
		return nil, err
	}
	page, err := h.Store.RawPackages(ctx, q)
	if err != nil {
		return nil, h.problemOf(ctx, "raw packages", err)
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

func (h *Handlers) transferPackages(ctx context.Context, in *transferPackagesInput) (*bodyOutput[postgres.Page[postgres.TransferPackage]], error) {
	q, err := h.listQuery(ctx, listParams{in.Limit, in.Offset, in.Site, in.From, in.To}, in.State)
	if err != nil {
		return nil, err
	}
	page, err := h.Store.TransferPackages(ctx, q)
	if err != nil {
		return nil, h.problemOf(ctx, "transfer packages", err)
	}
	return out(page), nil
}

type historyInput struct {
	Type kindParam `path:"operation_type"`
	ID   int64     `path:"operation_id" minimum:"1"`
}

func (h *Handlers) failureHistory(ctx context.Context, in *historyInput) (*bodyOutput[postgres.FailureHistory], error) {
	hist, err := h.Store.FailureHistory(ctx, transfer.Kind(in.Type), in.ID)
	if err != nil {
		return nil, h.problemOf(ctx, string(in.Type)+" operation", err)
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
	p, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	op, err := h.Store.Reset(ctx, transfer.Kind(in.Kind), in.ID, p.Username, in.Reason, in.DryRun)
	if err != nil {
		return nil, h.problemOf(ctx, string(in.Kind)+" operation", err)
	}
	if !in.DryRun {
		h.Waker.Wake()
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
	p, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := h.Store.ResetAllFailed(ctx, transfer.Kind(in.Kind), p.Username, in.Reason, in.DryRun)
	if err != nil {
		return nil, h.problemOf(ctx, "reset", err)
	}
	return out(ResetAll{IDs: ids, Count: len(ids), DryRun: in.DryRun}), nil
}

type legacyResetInput struct {
	ID     int64  `path:"id" minimum:"1"`
	DryRun bool   `query:"dry_run" doc:"Change nothing; answer what would be reset."`
	Reason string `query:"reason" maxLength:"1000" doc:"Why; kept in the history with the caller's username."`
}

func (h *Handlers) resetLegacy(kind postgres.LegacyKind) func(context.Context, *legacyResetInput) (*bodyOutput[postgres.LegacyReset], error) {
	return func(ctx context.Context, in *legacyResetInput) (*bodyOutput[postgres.LegacyReset], error) {
		p, err := admin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := h.Store.ResetLegacy(ctx, kind, in.ID, p.Username, in.Reason, in.DryRun)
		if err != nil {
			return nil, h.problemOf(ctx, string(kind)+" row", err)
		}
		return out(res), nil
	}
}

func (h *Handlers) resetAllLegacy(kind postgres.LegacyKind) func(context.Context, *resetParams) (*bodyOutput[postgres.LegacyResetAll], error) {
	return func(ctx context.Context, in *resetParams) (*bodyOutput[postgres.LegacyResetAll], error) {
		p, err := admin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := h.Store.ResetAllLegacy(ctx, kind, p.Username, in.Reason, in.DryRun)
		if err != nil {
			return nil, h.problemOf(ctx, "reset", err)
		}
		return out(res), nil
	}
}

// Reconciled is the body of the reconcile routes.
type Reconciled struct {
	Changes []postgres.StateChange `json:"changes" doc:"Each package whose stored state changed: {package_id, from, to}."`
	Count   int                    `json:"count"`
}

type packageIDInput struct {
	ID string `path:"id" format:"uuid" doc:"The raw data package's id (UUID)."`
}

func (h *Handlers) reconcileOne(ctx context.Context, in *packageIDInput) (*bodyOutput[Reconciled], error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	id, err := uuid.Parse(in.ID)
	if err != nil {
		return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "path.id", Message: "not a UUID", Value: in.ID})
	}
	changes, err := h.Reconciler.ReconcileOne(ctx, id)
	if err != nil {
		return nil, h.problemOf(ctx, "raw data package in the transfer pipeline", err)
	}
	return out(Reconciled{Changes: changes, Count: len(changes)}), nil
}

func (h *Handlers) reconcileInconsistent(ctx context.Context, _ *struct{}) (*bodyOutput[Reconciled], error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	changes, err := h.Reconciler.ReconcileInconsistent(ctx)
	if err != nil {
		return nil, h.problemOf(ctx, "reconcile", err)
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
	Body     postgres.StagingJob
}

func (h *Handlers) requestStaging(ctx context.Context, in *struct{ Body stagingBody }) (*stagingCreated, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	job, err := h.Store.CreateStaging(ctx, p.Username, in.Body.RawDataPackageIDs, in.Body.Destination, in.Body.Reason)
	if err != nil {
		return nil, h.problemOf(ctx, "staging", err)
	}
	return &stagingCreated{Location: "/api/transfer/staging/" + strconv.FormatInt(job.ID, 10), Body: job}, nil
}

func (h *Handlers) getStaging(ctx context.Context, in *struct {
	ID int64 `path:"id" minimum:"1" doc:"The staging job's id (from the Location of its request)."`
}) (*struct{ Body postgres.StagingJob }, error) {
	job, err := h.Store.StagingJobByID(ctx, in.ID)
	if err != nil {
		return nil, h.problemOf(ctx, "staging job", err)
	}
	return &struct{ Body postgres.StagingJob }{Body: job}, nil
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

// holder is the lease holder name of an agent request.
func holder(p *authn.Principal, agent string) string {
	if agent == "" {
		return p.Username
	}
	return p.Username + "/" + agent
}

func (h *Handlers) claim(ctx context.Context, in *struct{ Body claimBody }) (*bodyOutput[Claimed], error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	kinds := make([]transfer.Kind, 0, len(in.Body.Kinds))
	seen := map[kindName]bool{}
	for _, k := range in.Body.Kinds {
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, transfer.Kind(k))
		}
	}
	max := in.Body.Max
	if max == 0 {
		max = 1
	}
	ops, err := h.Claimer.Claim(ctx, postgres.ClaimRequest{Holder: holder(p, in.Body.Agent), Kinds: kinds, Site: in.Body.Site, Max: max})
	if err != nil {
		return nil, h.problemOf(ctx, "claim", err)
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
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	agent := ""
	if in.Body != nil {
		agent = in.Body.Agent
	}
	op, err := h.Store.Heartbeat(ctx, in.ID, holder(p, agent))
	if err != nil {
		return nil, h.problemOf(ctx, "operation", err)
	}
	return out(op), nil
}

type copyBody struct {
	Location string `json:"location" minLength:"1" maxLength:"63" doc:"A data location's name." example:"cornell-archive"`
	Path     string `json:"path" minLength:"1" maxLength:"1024" doc:"Where the copy is, at that location."`
}

type completeBody struct {
	Agent          string     `json:"agent,omitempty" maxLength:"100"`
	Bytes          int64      `json:"bytes" minimum:"0" doc:"Bytes moved."`
	Checksum       string     `json:"checksum" maxLength:"200" doc:"Checksum of what was moved, e.g. sha256:<hex>."`
	PhysicalCopies []copyBody `json:"physical_copies,omitempty" maxItems:"1000" doc:"Copies made."`
}

type completeInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body completeBody
}

func (h *Handlers) complete(ctx context.Context, in *completeInput) (*bodyOutput[transfer.Operation], error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	copies := make([]postgres.Copy, len(in.Body.PhysicalCopies))
	for i, c := range in.Body.PhysicalCopies {
		copies[i] = postgres.Copy{Location: c.Location, Path: c.Path}
	}
	op, err := h.Completer.Complete(ctx, postgres.CompleteRequest{ID: in.ID, Holder: holder(p, in.Body.Agent), Bytes: in.Body.Bytes, Checksum: in.Body.Checksum, Copies: copies})
	if err != nil {
		return nil, h.problemOf(ctx, "operation", err)
	}
	h.Waker.Wake()
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
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	op, err := h.Store.Fail(ctx, in.ID, holder(p, in.Body.Agent), postgres.Failure{
		ErrorType: in.Body.ErrorType, Message: in.Body.Message, Retryable: in.Body.Retryable, LogPath: in.Body.LogPath,
	})
	if err != nil {
		return nil, h.problemOf(ctx, "operation", err)
	}
	return out(op), nil
}
