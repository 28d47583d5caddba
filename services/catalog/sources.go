package catalog

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// SourceListQuery is a source list request as given: the cone parameters are the query's
// strings, so a bad value is answered naming the parameter.
type SourceListQuery struct {
	Q, Kind                  string
	ProgramID                int64
	RADeg, DecDeg, RadiusDeg string // cone search: all three or none
	Limit, Offset            int
}

// ListSources returns one page of the sources matching q: by name, or with a cone by distance
// from its centre.
func (s *Service) ListSources(ctx context.Context, in SourceListQuery) (Page[Source], error) {
	q := SourceQuery{Q: strings.TrimSpace(in.Q), Kind: in.Kind, ProgramID: in.ProgramID, Limit: in.Limit, Offset: in.Offset}
	if err := parseCone(in, &q); err != nil {
		return Page[Source]{}, err
	}
	return s.Store.ListSources(ctx, q)
}

// parseCone reads the cone parameters: all three or none.
func parseCone(in SourceListQuery, q *SourceQuery) error {
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
			return 0, problem.Field("query."+name, "a cone search needs ra_deg, dec_deg and radius_deg", nil)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, problem.Field("query."+name, "must be a number", v)
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
		return problem.Field("query.ra_deg", "must be within [0, 360)", ra)
	case dec < -90 || dec > 90:
		return problem.Field("query.dec_deg", "must be within [-90, 90]", dec)
	case r <= 0 || r > MaxConeRadius:
		return problem.Field("query.radius_deg", "must be > 0 and at most 10", r)
	}
	q.RADeg, q.DecDeg, q.Radius = &ra, &dec, &r
	return nil
}

// GetSource returns one source with its aliases.
func (s *Service) GetSource(ctx context.Context, id int64) (Source, error) {
	return s.Store.GetSource(ctx, id)
}

// CreateSource checks a source body (for resolve=true, fills it from the name resolver) and
// stores it, created by the caller.
func (s *Service) CreateSource(ctx context.Context, caller Caller, spec SourceSpec) (Source, error) {
	if err := s.prepareSource(ctx, &spec); err != nil {
		return Source{}, err
	}
	return s.Store.CreateSource(ctx, spec, caller.Name)
}

// UpdateSource checks a source body as CreateSource does and replaces the source's fields and
// aliases, when the caller may change the source (MaySourceChange, owners.go).
func (s *Service) UpdateSource(ctx context.Context, caller Caller, id int64, spec SourceSpec) (Source, error) {
	if err := s.prepareSource(ctx, &spec); err != nil {
		return Source{}, err
	}
	return s.Store.ReplaceSource(ctx, id, spec, func(o SourceOwners) error { return MaySourceChange(caller, id, o) })
}

// DeleteSource deletes a source and its aliases when the caller may change it (a conflict while
// obs units use it).
func (s *Service) DeleteSource(ctx context.Context, caller Caller, id int64) error {
	return s.Store.DeleteSource(ctx, id, func(o SourceOwners) error { return MaySourceChange(caller, id, o) })
}

// prepareSource checks a source body and, for resolve=true, fills it from the resolver.
func (s *Service) prepareSource(ctx context.Context, spec *SourceSpec) error {
	if err := spec.Normalize(); err != nil {
		return err
	}
	if !spec.Resolve {
		return nil
	}
	answers, err := s.Resolver.Resolve(ctx, []string{spec.Name})
	if err != nil {
		return err
	}
	a := answers[0]
	if !a.Found {
		msg := "could not be resolved to coordinates"
		if a.Error != "" {
			msg += " (" + a.Error + ")"
		}
		return problem.Field("body.name", msg, spec.Name)
	}
	if a.RADeg == nil || a.DecDeg == nil {
		return &ConflictError{Location: "body.name", Message: fmt.Sprintf("%q is the %s source %q, which has no fixed coordinates", spec.Name, a.Kind, a.Name)}
	}
	names := a.Aliases
	if a.Name != "" && a.Resolver != resolve.ByCoordinates {
		names = append([]string{a.Name}, names...)
	}
	spec.ApplyResolved(*a.RADeg, *a.DecDeg, a.ObjectType, a.Resolver, a.Reference, names)
	if a.PMRAMasYr != nil && a.PMDecMasYr != nil && a.Epoch != nil && spec.PMRAMasYr == nil && spec.PMDecMasYr == nil {
		spec.PMRAMasYr, spec.PMDecMasYr, spec.Epoch = a.PMRAMasYr, a.PMDecMasYr, a.Epoch // the catalogue's proper motion
	}
	return nil
}

// SourceChip returns the compact card of a source: where it is in the site's sky now, whether
// it is observable now, and the programs using it.
func (s *Service) SourceChip(ctx context.Context, id int64) (Chip, error) {
	src, err := s.Store.GetSource(ctx, id)
	if err != nil {
		return Chip{}, err
	}
	progs, err := s.Store.ProgramsUsing(ctx, src.ID)
	if err != nil {
		return Chip{}, err
	}
	at := s.now()
	chip := Chip{ID: src.ID, Name: src.Name, Kind: src.Kind, RADeg: src.RADeg, DecDeg: src.DecDeg, ObjectType: src.ObjectType,
		At: at, Programs: progs, Limits: ChipLimits{MinElevationDeg: s.Site.MinElevationDeg,
			MaxElevationDeg: s.Site.MaxElevationDeg, SunAvoidanceDeg: s.Site.SunAvoidanceDeg}}
	vsrc := visibility.Source{Kind: src.Kind, PMRAMasYr: deref(src.PMRAMasYr),
		PMDecMasYr: deref(src.PMDecMasYr), Epoch: deref(src.Epoch), ElevationDeg: deref(src.ElevationDeg),
		AzMinDeg: deref(src.AzMinDeg), AzMaxDeg: deref(src.AzMaxDeg)}
	if src.RADeg != nil && src.DecDeg != nil {
		vsrc.RADeg, vsrc.DecDeg = *src.RADeg, *src.DecDeg
	}
	if src.Body != nil {
		vsrc.Body = *src.Body
	}
	if src.Kind == KindSolarSystem {
		ra, dec, err := visibility.BodyICRS(vsrc.Body, at)
		if err != nil {
			return Chip{}, err
		}
		chip.RADeg, chip.DecDeg = &ra, &dec
	}
	if err := vsrc.Validate(); err != nil {
		return Chip{}, err
	}
	pos := visibility.At(s.Site, &vsrc, at)
	chip.AltDeg, chip.AzDeg = round(pos.AltDeg, 4), round(pos.AzDeg, 4)
	chip.SunSepDeg = round(pos.SunSepDeg, 3)
	chip.ObservableNow = pos.Observable
	if chip.RADeg != nil {
		chip.RAHMS, chip.DecDMS = resolve.FormatRA(*chip.RADeg), resolve.FormatDec(*chip.DecDeg)
	}
	return chip, nil
}

// SourceDetails returns the full record of a source, where its coordinates came from, and
// the obs units using it.
func (s *Service) SourceDetails(ctx context.Context, id int64) (SourceDetails, error) {
	src, err := s.Store.GetSource(ctx, id)
	if err != nil {
		return SourceDetails{}, err
	}
	units, err := s.Store.ObsUnitsUsing(ctx, src.ID)
	if err != nil {
		return SourceDetails{}, err
	}
	return SourceDetails{Source: src, Provenance: provenance(src), ObsUnits: units}, nil
}

// provenance says in words where a source's coordinates came from.
func provenance(s Source) string {
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
	case KindSolarSystem:
		return "solar-system body: position computed for each request from analytical ephemerides"
	case KindConstantElevation:
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

// ResolveNames resolves 1-100 names (names) or one (name; not both) to positions: one answer
// per input, in input order, found or not.
func (s *Service) ResolveNames(ctx context.Context, names []string, name string) ([]resolve.Answer, error) {
	switch {
	case len(names) > 0 && name != "":
		return nil, problem.Field("body.name", "give names or name, not both", nil)
	case len(names) == 0 && strings.TrimSpace(name) == "":
		return nil, problem.Field("body.names", "give names (1-100) or name", nil)
	case len(names) == 0:
		names = []string{name}
	}
	for i, n := range names {
		if len(n) > 255 {
			return nil, problem.Field(fmt.Sprintf("body.names[%d]", i), "at most 255 characters", nil)
		}
	}
	return s.Resolver.Resolve(ctx, names)
}

// ProgramSources returns the sources of a program's obs units by id (the table export of a program).
func (s *Service) ProgramSources(ctx context.Context, programID int64) (map[int64]Source, error) {
	page, err := s.Store.ListSources(ctx, SourceQuery{ProgramID: programID, Limit: 500}) // a program has at most 500 obs units (ProgramSpec.ObsUnits)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]Source, len(page.Items))
	for _, src := range page.Items {
		out[src.ID] = src
	}
	return out, nil
}
