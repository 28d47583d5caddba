package httpapi

import (
	"context"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/services/catalog"
)

// ---- GET /visibility/now ----

type nowInput struct {
	At    string `query:"at" doc:"RFC 3339; default now (to the second)."`
	Limit int    `query:"limit" minimum:"1" maximum:"5000" default:"50" doc:"How many of the ranked obs units to answer (total counts all)."`
}

// Resolve rejects unknown parameters.
func (in *nowInput) Resolve(ctx huma.Context) []error {
	return unknownParams(ctx, "at", "limit")
}

func (h *Handlers) visibilityNow(ctx context.Context, in *nowInput) (*bodyOutput[catalog.NowRanking], error) {
	r, err := h.Catalog.VisibilityNow(ctx, catalog.NowQuery{At: in.At, Limit: in.Limit})
	if err != nil {
		return nil, err
	}
	return &bodyOutput[catalog.NowRanking]{Body: r}, nil
}
