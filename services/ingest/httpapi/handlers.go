package httpapi

import (
	"context"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/ingest"
)

// Each handler decodes its input, calls the use case of ingest.Service and encodes the answer;
// errors are the service's domain errors, returned as they are.

// writeInput is a buffered write: its raw body (decoded by the ingest package) and an optional
// Idempotency-Key.
type writeInput struct {
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"Makes retries safe: the same key and body answer the original response (Idempotency-Replayed: true); another body 409. Kept 24 h."`
	RawBody        []byte `doc:"JSON body (see the schema)."`
}

// finishInput is a finish: the execution's id and the write.
type finishInput struct {
	ID             string `path:"id" doc:"The executed obs unit (UUID)."`
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255"`
	RawBody        []byte `doc:"JSON body (see the schema)."`
}

// writeOutput is the answer of a buffered write.
type writeOutput struct {
	Status   int    `json:"-"`
	Location string `header:"Location"`
	Replayed string `header:"Idempotency-Replayed" doc:"true when this is the stored answer of an earlier request with the same Idempotency-Key."`
	Body     ingest.BufferedAnswer
}

// written encodes the answer of a buffered write.
func written(a ingest.WriteAnswer, err error) (*writeOutput, error) {
	if err != nil {
		return nil, err
	}
	out := &writeOutput{Status: a.Status, Location: a.Location, Body: a.Body}
	if a.Replayed {
		out.Replayed = "true"
	}
	return out, nil
}

func caller(ctx context.Context) ingest.Caller { return ingest.CallerOf(authn.PrincipalFrom(ctx)) }

func request(in *writeInput) ingest.WriteRequest {
	return ingest.WriteRequest{Key: in.IdempotencyKey, Body: in.RawBody}
}

func (h *Handlers) start(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return written(h.Service.Start(ctx, caller(ctx), request(in)))
}

func (h *Handlers) finish(ctx context.Context, in *finishInput) (*writeOutput, error) {
	return written(h.Service.Finish(ctx, caller(ctx), in.ID, ingest.WriteRequest{Key: in.IdempotencyKey, Body: in.RawBody}))
}

func (h *Handlers) registerFile(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return written(h.Service.RegisterFile(ctx, caller(ctx), request(in)))
}

func (h *Handlers) registerBulk(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return written(h.Service.RegisterFiles(ctx, caller(ctx), request(in)))
}

func (h *Handlers) createPackage(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return written(h.Service.CreatePackage(ctx, caller(ctx), request(in)))
}

type listExecutionsInput struct {
	ObsUnitID int64 `path:"obs_unit_id" minimum:"1" doc:"The planned obs unit (catalog)."`
	Limit     int   `query:"limit" default:"50" minimum:"1" maximum:"500"`
	Offset    int   `query:"offset" default:"0" minimum:"0"`
}

type listExecutionsOutput struct {
	Body ingest.Page[ingest.ExecutedObsUnit]
}

func (h *Handlers) listExecutions(ctx context.Context, in *listExecutionsInput) (*listExecutionsOutput, error) {
	page, err := h.Service.ListExecutions(ctx, in.ObsUnitID, in.Limit, in.Offset)
	if err != nil {
		return nil, err
	}
	return &listExecutionsOutput{Body: page}, nil
}

type fileIDInput struct {
	ID string `path:"id" doc:"The file (UUID)."`
}

type fileOutput struct{ Body ingest.RawDataFile }

func (h *Handlers) getFile(ctx context.Context, in *fileIDInput) (*fileOutput, error) {
	f, err := h.Service.File(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return &fileOutput{Body: f}, nil
}

type packageInput struct {
	ID     string `path:"id" doc:"The package (UUID)."`
	Limit  int    `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Files per page."`
	Offset int    `query:"offset" default:"0" minimum:"0"`
}

type packageOutput struct{ Body ingest.PackageView }

func (h *Handlers) getPackage(ctx context.Context, in *packageInput) (*packageOutput, error) {
	v, err := h.Service.Package(ctx, in.ID, in.Limit, in.Offset)
	if err != nil {
		return nil, err
	}
	return &packageOutput{Body: v}, nil
}

type updateFileInput struct {
	ID      string `path:"id" doc:"The file (UUID)."`
	RawBody []byte `doc:"JSON body (see the schema)."`
}

func (h *Handlers) updateFile(ctx context.Context, in *updateFileInput) (*fileOutput, error) {
	f, err := h.Service.UpdateFile(ctx, caller(ctx), in.ID, in.RawBody)
	if err != nil {
		return nil, err
	}
	return &fileOutput{Body: f}, nil
}

type finalizeInput struct {
	ID      string `path:"id" doc:"The package (UUID)."`
	RawBody []byte `doc:"JSON body (see the schema)."`
}

type finalizeOutput struct{ Body ingest.RawDataPackage }

func (h *Handlers) finalize(ctx context.Context, in *finalizeInput) (*finalizeOutput, error) {
	p, err := h.Service.Finalize(ctx, caller(ctx), in.ID, in.RawBody)
	if err != nil {
		return nil, err
	}
	return &finalizeOutput{Body: p}, nil
}

type receiptInput struct {
	TransactionID string `path:"transaction_id" doc:"The transaction_id of a buffered write's answer."`
}

type receiptOutput struct{ Body ingest.Receipt }

func (h *Handlers) receipt(ctx context.Context, in *receiptInput) (*receiptOutput, error) {
	r, err := h.Service.Receipt(ctx, caller(ctx), in.TransactionID)
	if err != nil {
		return nil, err
	}
	return &receiptOutput{Body: r}, nil
}

// ---- internal: obs-unit fences ----

func (h *Handlers) pendingObsUnits(ctx context.Context, in *struct{ Body contract.PendingRequest }) (*struct{ Body contract.PendingAnswer }, error) {
	a, err := h.Service.PendingExecutions(ctx, authn.InternalTrusted(ctx), in.Body)
	if err != nil {
		return nil, err
	}
	return &struct{ Body contract.PendingAnswer }{a}, nil
}

type fenceInput struct {
	Body contract.FenceRequest
}

func (h *Handlers) fenceObsUnits(ctx context.Context, in *fenceInput) (*struct{ Body contract.FenceAnswer }, error) {
	a, err := h.Service.FenceObsUnits(ctx, authn.InternalTrusted(ctx), in.Body)
	if err != nil {
		return nil, err
	}
	return &struct{ Body contract.FenceAnswer }{a}, nil
}

func (h *Handlers) sealObsUnits(ctx context.Context, in *fenceInput) (*struct{}, error) {
	return nil, h.Service.SealObsUnits(ctx, authn.InternalTrusted(ctx), in.Body)
}

func (h *Handlers) releaseObsUnits(ctx context.Context, in *fenceInput) (*struct{}, error) {
	return nil, h.Service.ReleaseObsUnits(ctx, authn.InternalTrusted(ctx), in.Body)
}
