package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// IDParam is the {id} of a program or source (exported: huma reads embedded params only from exported types).
type IDParam struct {
	ID int64 `path:"id" minimum:"1" doc:"Id."`
}

type instrumentIDInput struct {
	ID int `path:"id" minimum:"1" maximum:"2147483647" doc:"Instrument id."`
}

// PageParams are the paging parameters of every list (DESIGN §8).
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
	PageParams
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

// ResolveAnswers is the body of POST /sources/resolve: one item per input, in input order.
type ResolveAnswers struct {
	Items []resolve.Answer `json:"items"`
}

type bodyOutput[T any] struct {
	Body T
}

type createdOutput[T any] struct {
	Location string `header:"Location"`
	Body     T
}

func out[T any](v T) *bodyOutput[T] { return &bodyOutput[T]{Body: v} }

// problem turns a catalog error into its problem response; unexpected errors are logged and
// answered with a 500 that reveals nothing.
func (h *Handlers) problem(ctx context.Context, what string, err error) error {
	var input *catalog.InputError
	var conflict *catalog.ConflictError
	switch {
	case errors.As(err, &input):
		loc := input.Field
		if !strings.HasPrefix(loc, "query.") && !strings.HasPrefix(loc, "path.") {
			loc = "body." + loc
		}
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: input.Message, Value: input.Value})
	case errors.As(err, &conflict):
		var details []error
		if conflict.Field != "" {
			details = append(details, &huma.ErrorDetail{Location: "body." + conflict.Field, Message: conflict.Message})
		}
		return huma.Error409Conflict(conflict.Message, details...)
	case errors.Is(err, catalog.ErrNotFound):
		return huma.Error404NotFound("no " + what + " with this id")
	}
	if database.MainUnreachable(err) { // a secondary site with its WAN down: a quick 503
		return database.ErrMainUnreachable
	}
	// A generic 500 for the client; the chassis logs the cause once, with the request id.
	return problem.Internal.New("").WithCause(fmt.Errorf("catalog %s: %w", what, err))
}

func callerName(ctx context.Context) string {
	if p := authn.PrincipalFrom(ctx); p != nil {
		return p.Username
	}
	return ""
}

// ---- instruments ----

func (h *Handlers) listInstruments(ctx context.Context, in *PageParams) (*bodyOutput[catalog.Page[catalog.Instrument]], error) {
	all, err := h.Store.Instruments(ctx)
	if err != nil {
		return nil, h.problem(ctx, "instrument", err)
	}
	page := catalog.Page[catalog.Instrument]{Items: []catalog.Instrument{}, Total: len(all), Limit: in.Limit, Offset: in.Offset}
	if in.Offset < len(all) {
		page.Items = all[in.Offset:min(len(all), in.Offset+in.Limit)]
	}
	return out(page), nil
}

func (h *Handlers) getInstrument(ctx context.Context, in *instrumentIDInput) (*bodyOutput[catalog.Instrument], error) {
	ins, err := h.Store.Instrument(ctx, in.ID)
	if err != nil {
		return nil, h.problem(ctx, "instrument", err)
	}
	return out(ins), nil
}

// ---- programs ----

func (h *Handlers) listPrograms(ctx context.Context, in *programListInput) (*bodyOutput[catalog.Page[catalog.Program]], error) {
	page, err := h.Store.ListPrograms(ctx, catalog.ProgramQuery{Status: in.Status, PI: strings.TrimSpace(in.PI),
		Q: strings.TrimSpace(in.Q), Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	return out(page), nil
}

func (h *Handlers) createProgram(ctx context.Context, in *struct{ Body catalog.ProgramSpec }) (*createdOutput[catalog.Program], error) {
	if err := in.Body.Normalize(); err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	p, err := h.Store.CreateProgram(ctx, in.Body, callerName(ctx))
	if err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	return &createdOutput[catalog.Program]{Location: fmt.Sprintf("/observing_program/%d", p.ID), Body: p}, nil
}

func (h *Handlers) getProgram(ctx context.Context, in *IDParam) (*bodyOutput[catalog.Program], error) {
	p, err := h.Store.GetProgram(ctx, in.ID)
	if err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	return out(p), nil
}

func (h *Handlers) replaceProgram(ctx context.Context, in *struct {
	IDParam
	Body catalog.ProgramSpec
}) (*bodyOutput[catalog.Program], error) {
	if err := in.Body.Normalize(); err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	p, err := h.Store.ReplaceProgram(ctx, in.ID, in.Body)
	if err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	return out(p), nil
}

func (h *Handlers) deleteProgram(ctx context.Context, in *IDParam) (*struct{}, error) {
	if err := h.Store.DeleteProgram(ctx, in.ID); err != nil {
		return nil, h.problem(ctx, "program", err)
	}
	return nil, nil
}

// ---- sources ----

// parseCone reads the cone parameters: all three or none.
func parseCone(in *sourceListInput, q *catalog.SourceQuery) error {
	given := 0
	for _, v := range []string{in.RADeg, in.DecDeg, in.RadiusDeg} {
		if v != "" {
			given++
		}
	}
	if given == 0 {
		return nil
	}
	num := func(name, v string) (float64, error) {
		if v == "" {
			return 0, &catalog.InputError{Field: "query." + name, Message: "a cone search needs ra_deg, dec_deg and radius_deg"}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, &catalog.InputError{Field: "query." + name, Message: "must be a number", Value: v}
		}
		return f, nil
	}
	ra, err := num("ra_deg", in.RADeg)
	if err != nil {
		return err
	}
	dec, err := num("dec_deg", in.DecDeg)
	if err != nil {
		return err
	}
	r, err := num("radius_deg", in.RadiusDeg)
	if err != nil {
		return err
	}
	switch {
	case ra < 0 || ra >= 360:
		return &catalog.InputError{Field: "query.ra_deg", Message: "must be within [0, 360)", Value: ra}
	case dec < -90 || dec > 90:
		return &catalog.InputError{Field: "query.dec_deg", Message: "must be within [-90, 90]", Value: dec}
	case r <= 0 || r > catalog.MaxConeRadius:
		return &catalog.InputError{Field: "query.radius_deg", Message: "must be > 0 and at most 10", Value: r}
	}
	q.RADeg, q.DecDeg, q.Radius = &ra, &dec, &r
	return nil
}

func (h *Handlers) listSources(ctx context.Context, in *sourceListInput) (*bodyOutput[catalog.Page[catalog.Source]], error) {
	q := catalog.SourceQuery{Q: strings.TrimSpace(in.Q), Kind: in.Kind, ProgramID: in.ProgramID, Limit: in.Limit, Offset: in.Offset}
	if err := parseCone(in, &q); err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	page, err := h.Store.ListSources(ctx, q)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return out(page), nil
}

// prepareSource checks a source body and, for resolve=true, fills it from the resolver.
func (h *Handlers) prepareSource(ctx context.Context, spec *catalog.SourceSpec) error {
	if err := spec.Normalize(); err != nil {
		return err
	}
	if !spec.Resolve {
		return nil
	}
	answers, err := h.Resolver.Resolve(ctx, []string{spec.Name})
	if err != nil {
		return err
	}
	a := answers[0]
	if !a.Found {
		msg := "could not be resolved to coordinates"
		if a.Error != "" {
			msg += " (" + a.Error + ")"
		}
		return &catalog.InputError{Field: "name", Message: msg, Value: spec.Name}
	}
	if a.RADeg == nil || a.DecDeg == nil {
		return &catalog.ConflictError{Field: "name", Message: fmt.Sprintf("%q is the %s source %q, which has no fixed coordinates", spec.Name, a.Kind, a.Name)}
	}
	names := a.Aliases
	if a.Name != "" && a.Resolver != resolve.ByCoordinates {
		names = append([]string{a.Name}, names...)
	}
	spec.ApplyResolved(*a.RADeg, *a.DecDeg, a.ObjectType, a.Resolver, a.Reference, names)
	return nil
}

func (h *Handlers) createSource(ctx context.Context, in *struct{ Body catalog.SourceSpec }) (*createdOutput[catalog.Source], error) {
	if err := h.prepareSource(ctx, &in.Body); err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	src, err := h.Store.CreateSource(ctx, in.Body, callerName(ctx))
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return &createdOutput[catalog.Source]{Location: fmt.Sprintf("/sources/%d", src.ID), Body: src}, nil
}

func (h *Handlers) getSource(ctx context.Context, in *IDParam) (*bodyOutput[catalog.Source], error) {
	src, err := h.Store.GetSource(ctx, in.ID)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return out(src), nil
}

func (h *Handlers) replaceSource(ctx context.Context, in *struct {
	IDParam
	Body catalog.SourceSpec
}) (*bodyOutput[catalog.Source], error) {
	if err := h.prepareSource(ctx, &in.Body); err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	src, err := h.Store.ReplaceSource(ctx, in.ID, in.Body)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return out(src), nil
}

func (h *Handlers) deleteSource(ctx context.Context, in *IDParam) (*struct{}, error) {
	if err := h.Store.DeleteSource(ctx, in.ID); err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return nil, nil
}

func (h *Handlers) now() time.Time {
	if h.Now != nil {
		return h.Now().UTC()
	}
	return time.Now().UTC()
}

func (h *Handlers) sourceChip(ctx context.Context, in *IDParam) (*bodyOutput[catalog.Chip], error) {
	src, err := h.Store.GetSource(ctx, in.ID)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	progs, err := h.Store.ProgramsUsing(ctx, src.ID)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	at := h.now()
	chip := catalog.Chip{ID: src.ID, Name: src.Name, Kind: src.Kind, RADeg: src.RADeg, DecDeg: src.DecDeg, ObjectType: src.ObjectType,
		At: at, Programs: progs, Limits: catalog.ChipLimits{MinElevationDeg: h.Site.MinElevationDeg,
			MaxElevationDeg: h.Site.MaxElevationDeg, SunAvoidanceDeg: h.Site.SunAvoidanceDeg}}
	vsrc := visibility.Source{Kind: src.Kind, PMRAMasYr: deref(src.PMRAMasYr),
		PMDecMasYr: deref(src.PMDecMasYr), Epoch: deref(src.Epoch), ElevationDeg: deref(src.ElevationDeg),
		AzMinDeg: deref(src.AzMinDeg), AzMaxDeg: deref(src.AzMaxDeg)}
	if src.RADeg != nil && src.DecDeg != nil {
		vsrc.RADeg, vsrc.DecDeg = *src.RADeg, *src.DecDeg
	}
	if src.Body != nil {
		vsrc.Body = *src.Body
	}
	if src.Kind == catalog.KindSolarSystem {
		ra, dec, err := visibility.BodyICRS(vsrc.Body, at)
		if err != nil {
			return nil, h.problem(ctx, "source", err)
		}
		chip.RADeg, chip.DecDeg = &ra, &dec
	}
	if err := vsrc.Validate(); err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	pos := visibility.At(h.Site, &vsrc, at)
	chip.AltDeg, chip.AzDeg = round(pos.AltDeg, 4), round(pos.AzDeg, 4)
	chip.SunSepDeg = round(pos.SunSepDeg, 3)
	chip.ObservableNow = pos.Observable
	if chip.RADeg != nil {
		chip.RAHMS, chip.DecDMS = resolve.FormatRA(*chip.RADeg), resolve.FormatDec(*chip.DecDeg)
	}
	return out(chip), nil
}

func (h *Handlers) sourceDetails(ctx context.Context, in *IDParam) (*bodyOutput[catalog.SourceDetails], error) {
	src, err := h.Store.GetSource(ctx, in.ID)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	units, err := h.Store.ObsUnitsUsing(ctx, src.ID)
	if err != nil {
		return nil, h.problem(ctx, "source", err)
	}
	return out(catalog.SourceDetails{Source: src, Provenance: provenance(src), ObsUnits: units}), nil
}

// provenance says in words where a source's coordinates came from.
func provenance(s catalog.Source) string {
	ref := ""
	if s.CoordReference != nil {
		ref = " (" + *s.CoordReference + ")"
	}
	switch s.CoordOrigin {
	case resolve.ByLocalCatalog:
		return "resolved from the offline catalogue shipped with the service" + ref
	case resolve.BySesame:
		return "resolved online with CDS Sesame" + ref
	case resolve.ByDatabase:
		return "copied from another source in the database" + ref
	case resolve.ByCoordinates:
		return "coordinates given as the name" + ref
	case "demo":
		return "demo data loaded by `catalog admin seed-demo`" + ref
	}
	switch s.Kind {
	case catalog.KindSolarSystem:
		return "solar-system body: position computed for each request from analytical ephemerides"
	case catalog.KindConstantElevation:
		return "constant-elevation field: given by its elevation and azimuth range"
	}
	return "entered by a user" + ref
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// ---- name resolution ----

func (h *Handlers) resolveNames(ctx context.Context, in *struct{ Body resolveBody }) (*bodyOutput[ResolveAnswers], error) {
	names := in.Body.Names
	switch {
	case len(names) > 0 && in.Body.Name != "":
		return nil, h.problem(ctx, "name", &catalog.InputError{Field: "name", Message: "give names or name, not both"})
	case len(names) == 0 && strings.TrimSpace(in.Body.Name) == "":
		return nil, h.problem(ctx, "name", &catalog.InputError{Field: "names", Message: "give names (1-100) or name"})
	case len(names) == 0:
		names = []string{in.Body.Name}
	}
	for i, n := range names {
		if len(n) > 255 {
			return nil, h.problem(ctx, "name", &catalog.InputError{Field: fmt.Sprintf("names[%d]", i), Message: "at most 255 characters"})
		}
	}
	answers, err := h.Resolver.Resolve(ctx, names)
	if err != nil {
		return nil, h.problem(ctx, "name", err)
	}
	return out(ResolveAnswers{Items: answers}), nil
}
