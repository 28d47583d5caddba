package httpapi

import (
	"context"
	"fmt"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/tables"
)

// IDParam is the {id} of a program or source (exported: huma reads embedded params only from exported types).
type IDParam struct {
	ID int64 `path:"id" minimum:"1" doc:"Id."`
}

type instrumentIDInput struct {
	ID int `path:"id" minimum:"1" maximum:"2147483647" doc:"Instrument id."`
}

// PageParams are the paging parameters of every list.
type PageParams struct {
	Limit  int `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size (1-500)."`
	Offset int `query:"offset" default:"0" minimum:"0" maximum:"100000000" doc:"Items to skip."`
}

type programListInput struct {
	PageParams
	Status string `query:"status" enum:"draft,active,completed,archived" doc:"Only programs with this status."`
	PI     string `query:"pi" maxLength:"255" doc:"Only programs of this PI (exact, any case)."`
	Q      string `query:"q" maxLength:"255" doc:"Any part of the short name or title, any case."`
}

type sourceListInput struct {
	Limit     int    `query:"limit" default:"50" minimum:"1" maximum:"10000" doc:"Page size: 1-500 in JSON, up to 10,000 in CSV and VOTable (a whole target list in one file)."`
	Offset    int    `query:"offset" default:"0" minimum:"0" maximum:"100000000" doc:"Items to skip."`
	Format    string `query:"format" enum:"json,csv,votable" doc:"csv or votable: the page as a table (as Accept: text/csv or application/x-votable+xml); the total is in X-Total-Count."`
	Accept    string `header:"Accept"`
	Q         string `query:"q" maxLength:"255" doc:"Any part of a name or alias; case and spaces ignored."`
	Kind      string `query:"kind" enum:"fixed,solar_system,constant_elevation"`
	ProgramID int64  `query:"program_id" minimum:"0" doc:"Only sources used by this program's obs units."`
	// Cone search: all three or none. Strings, so a bad value is answered naming the parameter.
	RADeg     string `query:"ra_deg" doc:"Cone centre RA, degrees in [0, 360)."`
	DecDeg    string `query:"dec_deg" doc:"Cone centre Dec, degrees in [-90, 90]."`
	RadiusDeg string `query:"radius_deg" doc:"Cone radius, degrees in (0, 10]."`
}

type resolveBody struct {
	Names []string `json:"names,omitempty" minItems:"1" maxItems:"100" doc:"1-100 names (or coordinate strings)." example:"[\"Vega\",\"M 31\",\"HD 172167\"]"`
	Name  string   `json:"name,omitempty" maxLength:"255" doc:"One name (instead of names)."`
}

// ResolveAnswers is the body of POST /sources/resolve: one item per input, in input order, and
// whether the online resolver is configured (so that "not found" is never ambiguous).
type ResolveAnswers struct {
	Items  []resolve.Answer `json:"items"`
	Online string           `json:"online" enum:"enabled,disabled" doc:"disabled: CDS Sesame is not configured (OPS_SESAME_URL unset), so names not found were looked for offline and in the database only."`
}

type bodyOutput[T any] struct {
	Body T
}

type createdOutput[T any] struct {
	Location string `header:"Location"`
	Body     T
}

func out[T any](v T) *bodyOutput[T] { return &bodyOutput[T]{Body: v} }

func caller(ctx context.Context) catalog.Caller { return catalog.CallerOf(authn.PrincipalFrom(ctx)) }

// ---- instruments ----

func (h *Handlers) listInstruments(ctx context.Context, in *PageParams) (*bodyOutput[catalog.Page[catalog.Instrument]], error) {
	page, err := h.Catalog.ListInstruments(ctx, catalog.PageQuery{Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

func (h *Handlers) getInstrument(ctx context.Context, in *instrumentIDInput) (*bodyOutput[catalog.Instrument], error) {
	ins, err := h.Catalog.GetInstrument(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return out(ins), nil
}

// ---- programs ----

func (h *Handlers) listPrograms(ctx context.Context, in *programListInput) (*bodyOutput[catalog.Page[catalog.Program]], error) {
	page, err := h.Catalog.ListPrograms(ctx, catalog.ProgramQuery{Status: in.Status, PI: in.PI, Q: in.Q, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, err
	}
	return out(page), nil
}

func (h *Handlers) createProgram(ctx context.Context, in *struct{ Body catalog.ProgramSpec }) (*createdOutput[catalog.Program], error) {
	p, err := h.Catalog.CreateProgram(ctx, caller(ctx), in.Body)
	if err != nil {
		return nil, err
	}
	return &createdOutput[catalog.Program]{Location: fmt.Sprintf("/observing_program/%d", p.ID), Body: p}, nil
}

func (h *Handlers) getProgram(ctx context.Context, in *programGetInput) (*tableOutput, error) {
	format := tables.Negotiate(in.Format, in.Accept)
	p, err := h.Catalog.GetProgram(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if format == tables.JSON {
		return encode(format, p, nil, 0)
	}
	sources, err := h.Catalog.ProgramSources(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	return encode(format, p, func() tables.Table { return tables.Program(p, sources) }, len(p.ObsUnits))
}

func (h *Handlers) replaceProgram(ctx context.Context, in *struct {
	IDParam
	Body catalog.ProgramReplacement
}) (*bodyOutput[catalog.Program], error) {
	p, err := h.Catalog.UpdateProgram(ctx, caller(ctx), in.ID, in.Body)
	if err != nil {
		return nil, err
	}
	return out(p), nil
}

func (h *Handlers) patchProgram(ctx context.Context, in *struct {
	IDParam
	Body catalog.ProgramPatch `contentType:"application/merge-patch+json"`
}) (*bodyOutput[catalog.Program], error) {
	p, err := h.Catalog.PatchProgram(ctx, caller(ctx), in.ID, in.Body)
	if err != nil {
		return nil, err
	}
	return out(p), nil
}

func (h *Handlers) deleteProgram(ctx context.Context, in *IDParam) (*struct{}, error) {
	return nil, h.Catalog.DeleteProgram(ctx, caller(ctx), in.ID)
}

// ---- sources ----

func (h *Handlers) listSources(ctx context.Context, in *sourceListInput) (*tableOutput, error) {
	format := tables.Negotiate(in.Format, in.Accept)
	if format == tables.JSON && in.Limit > maxJSONPage {
		return nil, problem.Field("query.limit", fmt.Sprintf("at most %d in JSON (up to %d with format=csv or votable)", maxJSONPage, tables.MaxImportRows), in.Limit)
	}
	page, err := h.Catalog.ListSources(ctx, catalog.SourceListQuery{Q: in.Q, Kind: in.Kind, ProgramID: in.ProgramID,
		RADeg: in.RADeg, DecDeg: in.DecDeg, RadiusDeg: in.RadiusDeg, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, err
	}
	return encode(format, page, func() tables.Table { return tables.Sources("sources", page.Items) }, page.Total)
}

func (h *Handlers) createSource(ctx context.Context, in *struct{ Body catalog.SourceSpec }) (*createdOutput[catalog.Source], error) {
	src, err := h.Catalog.CreateSource(ctx, caller(ctx), in.Body)
	if err != nil {
		return nil, err
	}
	return &createdOutput[catalog.Source]{Location: fmt.Sprintf("/sources/%d", src.ID), Body: src}, nil
}

func (h *Handlers) getSource(ctx context.Context, in *IDParam) (*bodyOutput[catalog.Source], error) {
	src, err := h.Catalog.GetSource(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return out(src), nil
}

func (h *Handlers) replaceSource(ctx context.Context, in *struct {
	IDParam
	Body catalog.SourceSpec
}) (*bodyOutput[catalog.Source], error) {
	src, err := h.Catalog.UpdateSource(ctx, caller(ctx), in.ID, in.Body)
	if err != nil {
		return nil, err
	}
	return out(src), nil
}

func (h *Handlers) deleteSource(ctx context.Context, in *IDParam) (*struct{}, error) {
	return nil, h.Catalog.DeleteSource(ctx, caller(ctx), in.ID)
}

func (h *Handlers) sourceChip(ctx context.Context, in *IDParam) (*bodyOutput[catalog.Chip], error) {
	chip, err := h.Catalog.SourceChip(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return out(chip), nil
}

func (h *Handlers) sourceDetails(ctx context.Context, in *IDParam) (*bodyOutput[catalog.SourceDetails], error) {
	d, err := h.Catalog.SourceDetails(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return out(d), nil
}

// ---- name resolution ----

func (h *Handlers) resolveNames(ctx context.Context, in *struct{ Body resolveBody }) (*bodyOutput[ResolveAnswers], error) {
	answers, err := h.Catalog.ResolveNames(ctx, in.Body.Names, in.Body.Name)
	if err != nil {
		return nil, err
	}
	return out(ResolveAnswers{Items: answers, Online: h.Catalog.Resolver.OnlineState()}), nil
}
