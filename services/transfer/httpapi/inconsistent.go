package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
)

// InconsistentSet is the answer of GET /api/transfer/raw-data-package/inconsistent.
type InconsistentSet struct {
	Items []uuid.UUID `json:"items" doc:"Ids of packages in the inconsistent set, sorted (at most limit)."`
	Count int64       `json:"count" doc:"How many packages the set holds."`
}

type inconsistentInput struct {
	Limit int `query:"limit" default:"100" minimum:"1" maximum:"1000" doc:"At most this many ids (1-1000)."`
}

func (h *Handlers) inconsistent(ctx context.Context, in *inconsistentInput) (*bodyOutput[InconsistentSet], error) {
	ids, n, err := h.Service.Inconsistent(ctx, in.Limit)
	if err != nil {
		return nil, err
	}
	return out(InconsistentSet{Items: ids, Count: n}), nil
}

// registerInconsistent adds the read of the inconsistent set (the reconcile routes change it).
func registerInconsistent(api huma.API, h *Handlers, tags []string) {
	huma.Register(api, h.Auth.Op(huma.Operation{
		OperationID: "list-inconsistent", Method: http.MethodGet, Path: "/api/transfer/raw-data-package/inconsistent",
		Summary: "The inconsistent set", Tags: tags, Errors: []int{422},
		Description: "Packages the periodic sweep found with a stored state that differs from the derivation of their chain, " +
			"waiting for a reconcile (POST .../reconcile-inconsistent, admins): {items, count}.",
	}), h.inconsistent)
}
