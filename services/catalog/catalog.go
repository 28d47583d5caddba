// Package catalog is the domain of the catalog service: instruments and their modules (reference
// data), sources (fixed, solar-system or constant-elevation) with their aliases, observing
// programs with their obs units, and the visibility of sources from the site. The rules live
// here: what a valid program or source is (catalog.go) and the use cases, as methods of Service
// (service.go: instruments; programs.go; sources.go: sources, chip, details, name resolution;
// visibility.go: visibility, heatmaps, precalculation). The package declares the Store it needs;
// the postgres package implements it, httpapi serves the use cases and app wires them.
package catalog

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// Config is the catalog service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr string `env:"OPS_CATALOG_ADDR" envDefault:"127.0.0.1:8083"`
	// Site is the observatory and its limits (the same variables as the site service), for the
	// source chip and the visibility engine.
	config.Site
	// SesameURL is the CDS Sesame name resolver (e.g. https://cds.unistra.fr/cgi-bin/nph-sesame);
	// empty: names are resolved offline only (shipped catalogue, then the database).
	SesameURL      string        `env:"OPS_SESAME_URL"`
	SesameTimeout  time.Duration `env:"OPS_SESAME_TIMEOUT" envDefault:"3s"`
	SesameCacheTTL time.Duration `env:"OPS_SESAME_CACHE_TTL" envDefault:"720h"`
	// CostlyPerUser and CostlyPerReplica bound the costly requests (visibility, heatmaps,
	// source searches) one replica runs at once, per user and in all (0: half the CPUs, at
	// least 1, so cheap reads always keep a core).
	CostlyPerUser    int `env:"OPS_CATALOG_COSTLY_PER_USER" envDefault:"2"`
	CostlyPerReplica int `env:"OPS_CATALOG_COSTLY_PER_REPLICA" envDefault:"0"`
	// FenceIngestURLs are the ingest APIs of the other sites (e.g. a secondary site's), each
	// with its own buffer: before obs units are deleted they are fenced there too, besides
	// OPS_INGEST_URL (deletes.go). One that cannot be reached makes such a delete answer 503.
	FenceIngestURLs []string `env:"OPS_CATALOG_FENCE_INGEST_URLS" envSeparator:","`
	// ImportBodyLimitBytes is the body limit of POST /sources/import: a VOTable of 10,000 sources
	// (the most one import takes) is about 4 MiB; every other route keeps OPS_BODY_LIMIT_BYTES.
	ImportBodyLimitBytes int `env:"OPS_CATALOG_IMPORT_BODY_LIMIT_BYTES" envDefault:"8388608"`
}

// Validate checks the resolver settings (config.Load validates the embedded site and common
// settings with their own Validate).
func (c *Config) Validate() error {
	switch {
	case c.CostlyPerUser < 1:
		return &config.Invalid{Var: "OPS_CATALOG_COSTLY_PER_USER", Reason: "must be at least 1"}
	case c.CostlyPerReplica < 0:
		return &config.Invalid{Var: "OPS_CATALOG_COSTLY_PER_REPLICA", Reason: "must be >= 0 (0: half the CPUs)"}
	case c.SesameTimeout < 100*time.Millisecond || c.SesameTimeout > 30*time.Second:
		return &config.Invalid{Var: "OPS_SESAME_TIMEOUT", Reason: "must be within 100ms..30s"}
	case c.ImportBodyLimitBytes < 1<<20 || c.ImportBodyLimitBytes > 1<<30:
		return &config.Invalid{Var: "OPS_CATALOG_IMPORT_BODY_LIMIT_BYTES", Reason: "must be within [1 MiB, 1 GiB]"}
	case c.SesameCacheTTL < time.Minute:
		return &config.Invalid{Var: "OPS_SESAME_CACHE_TTL", Reason: "must be at least 1m"}
	}
	for _, u := range c.FenceIngestURLs {
		if err := config.URL("OPS_CATALOG_FENCE_INGEST_URLS", u, "http", "https"); err != nil {
			return err
		}
	}
	if c.SesameURL != "" {
		if err := config.URL("OPS_SESAME_URL", c.SesameURL, "http", "https"); err != nil {
			return err
		}
	}
	return nil
}

// The catalog's errors are pkg/problem's vocabulary: invalid input is a *problem.FieldError
// naming the input (body.obs_units[2].source_id, query.ra_deg), an unknown id wraps
// problem.ErrNotFound, and a conflict with stored data is a *ConflictError.

// ConflictError is a write that contradicts stored data (a name in use, a source still used, a
// program with executed observations): a 409 naming the input where there is one.
type ConflictError struct {
	Location string // the input in conflict, e.g. body.short_name; empty when none
	Message  string // the problem's detail, written for the client
}

// Error is the conflict's message.
func (e *ConflictError) Error() string { return e.Message }

// ProblemKind makes the conflict a 409 (problem.Kinded).
func (e *ConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// Unwrap gives the problem the conflict is answered with: the 409 with its input listed in
// errors[] (a Kinded error alone has no errors[]), so handlers return a ConflictError as it is.
func (e *ConflictError) Unwrap() error {
	var details []problem.Detail
	if e.Location != "" {
		details = append(details, problem.Detail{Location: e.Location, Message: e.Message})
	}
	return problem.Conflict.New(e.Message, details...)
}

// Source kinds, the visibility engine's (visibility.KindFixed...).
const (
	KindFixed             = visibility.KindFixed
	KindSolarSystem       = visibility.KindSolarSystem
	KindConstantElevation = visibility.KindConstantElevation
)

// Limits beyond the request schemas (which bound lists and strings themselves).
const (
	MaxAliases    = 50   // aliases per source, also when taken from a resolver
	MaxConeRadius = 10.0 // degrees
)

// Instrument is an instrument with its modules (reference data shipped by migration 00006).
type Instrument struct {
	ID          int      `json:"id" db:"id"`
	Name        string   `json:"name" db:"name"`
	Description string   `json:"description" db:"description"`
	Modules     []Module `json:"modules"`
}

// Module is an instrument module; obs units and raw data refer to it by id.
type Module struct {
	ID     int            `json:"id"`
	Name   string         `json:"name"`
	Config map[string]any `json:"config" doc:"The module's nominal configuration (frequencies, detectors, beam, field of view)."`
}

// Program is an observing program with its obs units.
type Program struct {
	ID             int64     `json:"id"`
	ShortName      string    `json:"short_name"`
	Title          string    `json:"title"`
	PI             string    `json:"pi" doc:"The principal investigator's name as displayed."`
	PIUsername     string    `json:"pi_username" doc:"The PI's username: who may change and delete the program. Empty on a program no user created (seeded data): admins only."`
	Members        []string  `json:"members" doc:"Co-investigators (usernames): they may change the program's obs units and sources."`
	Description    string    `json:"description"`
	Status         string    `json:"status" enum:"draft,active,completed,archived"`
	AllocatedHours *float64  `json:"allocated_hours"`
	ObsUnits       []ObsUnit `json:"obs_units"`
	CreatedBy      string    `json:"created_by,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	ProgramTime
}

// ObsUnit is one schedulable observation of a program: a source with an instrument module.
type ObsUnit struct {
	ObsUnitTime
	ID                 int64    `json:"id"`
	Name               string   `json:"name"`
	SourceID           int64    `json:"source_id"`
	SourceName         string   `json:"source_name"`
	InstrumentModuleID int      `json:"instrument_module_id"`
	DurationS          float64  `json:"duration_s"`
	MinElevationDeg    *float64 `json:"min_elevation_deg"`
	Priority           *int     `json:"priority"`
	ObsUnitConstraints
}

// ProgramSpec is what a caller writes to create or replace a program.
type ProgramSpec struct {
	ShortName      string        `json:"short_name" minLength:"1" maxLength:"64" doc:"Unique short name (letters, digits, '-', '_', '.', '+'; 1-64)." example:"FYST-EoR-01"`
	Title          string        `json:"title" minLength:"1" maxLength:"500" example:"EoR-Spec deep field"`
	PI             string        `json:"pi" minLength:"1" maxLength:"255" doc:"Principal investigator (display name)." example:"A. Observer"`
	PIUsername     string        `json:"pi_username,omitempty" maxLength:"255" doc:"The PI's username; left out: the caller. Only an admin names someone else." example:"oscar"`
	Members        []string      `json:"members,omitempty" maxItems:"100" doc:"Co-investigators (usernames), who may change the obs units and sources."`
	Description    string        `json:"description,omitempty" maxLength:"20000"`
	Status         string        `json:"status,omitempty" enum:"draft,active,completed,archived" default:"draft"`
	AllocatedHours *float64      `json:"allocated_hours,omitempty" minimum:"0" maximum:"100000"`
	ObsUnits       []ObsUnitSpec `json:"obs_units,omitempty" maxItems:"500" doc:"The program's obs units."`
}

// ProgramReplacement is the body of PUT /observing_program/{id}: the whole program. Its required
// fields (short_name, title, pi, status) must be given; description and allocated_hours left out
// are empty and null. The program's sub-lists and ownership are kept when left out: obs_units
// (given, the list replaces the stored one, units matched by name keep their ids), members and
// pi_username.
type ProgramReplacement struct {
	ShortName      string        `json:"short_name" minLength:"1" maxLength:"64" doc:"Unique short name (letters, digits, '-', '_', '.', '+'; 1-64)." example:"FYST-EoR-01"`
	Title          string        `json:"title" minLength:"1" maxLength:"500" example:"EoR-Spec deep field"`
	PI             string        `json:"pi" minLength:"1" maxLength:"255" doc:"Principal investigator (display name)." example:"A. Observer"`
	PIUsername     string        `json:"pi_username,omitempty" maxLength:"255" doc:"The PI's username; left out: unchanged. Changing it hands the program over (its PI or an admin)."`
	Members        []string      `json:"members,omitempty" maxItems:"100" doc:"Co-investigators (usernames); left out: unchanged; [] removes them all (the PI or an admin)."`
	Description    string        `json:"description,omitempty" maxLength:"20000" doc:"Left out: empty."`
	Status         string        `json:"status" enum:"draft,active,completed,archived" doc:"Required: a replacement does not fall back to draft."`
	AllocatedHours *float64      `json:"allocated_hours,omitempty" minimum:"0" maximum:"100000" doc:"Left out: none (null)."`
	ObsUnits       []ObsUnitSpec `json:"obs_units,omitempty" maxItems:"500" doc:"The list replaces the stored one: units matched by name keep their ids, others are created or deleted; left out: the units stay as they are."`
}

// Spec is the replacement as a program body.
func (r ProgramReplacement) Spec() ProgramSpec {
	return ProgramSpec{ShortName: r.ShortName, Title: r.Title, PI: r.PI, PIUsername: r.PIUsername, Members: r.Members,
		Description: r.Description, Status: r.Status, AllocatedHours: r.AllocatedHours, ObsUnits: r.ObsUnits}
}

// ObsUnitSpec is one obs unit in a program body.
type ObsUnitSpec struct {
	Name               string   `json:"name" minLength:"1" maxLength:"255" example:"deep-1"`
	SourceID           int64    `json:"source_id" minimum:"1"`
	InstrumentModuleID int      `json:"instrument_module_id" minimum:"1" example:"14"`
	DurationS          float64  `json:"duration_s" exclusiveMinimum:"0" maximum:"864000" example:"3600"`
	MinElevationDeg    *float64 `json:"min_elevation_deg,omitempty" minimum:"0" maximum:"90" doc:"Replaces the site's lower elevation limit (OPS_SITE_MIN_ELEVATION_DEG) for this unit."`
	Priority           *int     `json:"priority,omitempty" minimum:"-1000" maximum:"1000"`
	ObsUnitConstraints
}

// Normalize trims and checks a program body beyond its schema: short-name characters, no
// control characters, unique obs-unit names.
func (p *ProgramSpec) Normalize() error {
	p.ShortName = strings.TrimSpace(p.ShortName)
	p.Title = strings.TrimSpace(p.Title)
	p.PI = strings.TrimSpace(p.PI)
	if p.Status == "" {
		p.Status = "draft"
	}
	if err := p.normalizeOwners(); err != nil {
		return err
	}
	if p.ShortName == "" {
		return problem.Field("body.short_name", "must not be blank", nil)
	}
	for _, r := range p.ShortName {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.+", r)) {
			return problem.Field("body.short_name", "may hold only letters, digits and - _ . +", p.ShortName)
		}
	}
	for field, v := range map[string]string{"title": p.Title, "pi": p.PI} {
		if v == "" {
			return problem.Field("body."+field, "must not be blank", nil)
		}
		if hasControl(v) {
			return problem.Field("body."+field, "must not contain control characters", nil)
		}
	}
	if p.AllocatedHours != nil && (math.IsNaN(*p.AllocatedHours) || *p.AllocatedHours < 0) {
		return problem.Field("body.allocated_hours", "must be >= 0", nil)
	}
	seen := map[string]int{}
	for i := range p.ObsUnits {
		u := &p.ObsUnits[i]
		u.Name = strings.TrimSpace(u.Name)
		f := fmt.Sprintf("obs_units[%d].name", i)
		if u.Name == "" {
			return problem.Field("body."+f, "must not be blank", nil)
		}
		if hasControl(u.Name) {
			return problem.Field("body."+f, "must not contain control characters", nil)
		}
		if j, dup := seen[u.Name]; dup {
			return problem.Field("body."+f, fmt.Sprintf("repeats the name of obs_units[%d]", j), u.Name)
		}
		seen[u.Name] = i
		if u.MinElevationDeg != nil && (math.IsNaN(*u.MinElevationDeg) || *u.MinElevationDeg < 0 || *u.MinElevationDeg > 90) {
			return problem.Field(fmt.Sprintf("body.obs_units[%d].min_elevation_deg", i), "must be within [0, 90] degrees", u.MinElevationDeg)
		}
		if err := u.ObsUnitConstraints.Validate(fmt.Sprintf("body.obs_units[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// ProgramQuery filters and pages the program list.
type ProgramQuery struct {
	Status, PI, Q string
	Limit, Offset int
}

// Page is one page of a list: the items with the total count and the paging that gave them.
type Page[T any] struct {
	Items  []T `json:"items"`
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// Source is a target of observations.
type Source struct {
	ID             int64    `json:"id"`
	Name           string   `json:"name"`
	Kind           string   `json:"kind" enum:"fixed,solar_system,constant_elevation"`
	RADeg          *float64 `json:"ra_deg" doc:"ICRS right ascension (fixed sources)."`
	DecDeg         *float64 `json:"dec_deg" doc:"ICRS declination (fixed sources)."`
	PMRAMasYr      *float64 `json:"pm_ra_mas_yr" doc:"Proper motion in RA, mu_alpha* (includes cos dec), mas/yr."`
	PMDecMasYr     *float64 `json:"pm_dec_mas_yr"`
	Epoch          *float64 `json:"epoch" doc:"Julian epoch of ra_deg/dec_deg (e.g. 2000.0)."`
	ParallaxMas    *float64 `json:"parallax_mas" doc:"Parallax, mas (fixed sources; kept for the record and for exports)."`
	RadialVelocity *float64 `json:"radial_velocity_kms" doc:"Radial velocity, km/s (fixed sources; kept for the record and for exports)."`
	Body           *string  `json:"body" doc:"Solar-system body (solar_system sources)."`
	ElevationDeg   *float64 `json:"elevation_deg" doc:"Fixed elevation (constant_elevation sources)."`
	AzMinDeg       *float64 `json:"az_min_deg"`
	AzMaxDeg       *float64 `json:"az_max_deg"`
	ObjectType     *string  `json:"object_type"`
	Aliases        []string `json:"aliases"`
	CoordOrigin    string   `json:"coord_origin" doc:"Where the coordinates came from: user, local_catalog, database, sesame or demo."`
	CoordReference *string  `json:"coord_reference" doc:"The catalogue entry or resolver database behind the coordinates."`
	// DistanceDeg is the distance from a cone search's centre (cone searches only).
	DistanceDeg *float64  `json:"distance_deg,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// SourceSpec is what a caller writes to create or replace a source.
type SourceSpec struct {
	Name           string   `json:"name" minLength:"1" maxLength:"255" example:"Orion KL"`
	Resolve        bool     `json:"resolve,omitempty" doc:"Take the coordinates, object type and aliases from the name resolver (POST /sources/resolve); leave out the coordinate fields."`
	Kind           string   `json:"kind,omitempty" enum:"fixed,solar_system,constant_elevation" doc:"Required unless resolve is true (then fixed)."`
	RADeg          *float64 `json:"ra_deg,omitempty" minimum:"0" exclusiveMaximum:"360"`
	DecDeg         *float64 `json:"dec_deg,omitempty" minimum:"-90" maximum:"90"`
	PMRAMasYr      *float64 `json:"pm_ra_mas_yr,omitempty" minimum:"-100000" maximum:"100000"`
	PMDecMasYr     *float64 `json:"pm_dec_mas_yr,omitempty" minimum:"-100000" maximum:"100000"`
	Epoch          *float64 `json:"epoch,omitempty" minimum:"1800" maximum:"2200"`
	ParallaxMas    *float64 `json:"parallax_mas,omitempty" minimum:"0" maximum:"1000" doc:"Parallax, mas (fixed sources)."`
	RadialVelocity *float64 `json:"radial_velocity_kms,omitempty" minimum:"-30000" maximum:"30000" doc:"Radial velocity, km/s (fixed sources)."`
	Body           *string  `json:"body,omitempty" enum:"sun,moon,mercury,venus,mars,jupiter,saturn,uranus,neptune"`
	ElevationDeg   *float64 `json:"elevation_deg,omitempty" minimum:"0" maximum:"90"`
	AzMinDeg       *float64 `json:"az_min_deg,omitempty" minimum:"0" maximum:"360"`
	AzMaxDeg       *float64 `json:"az_max_deg,omitempty" minimum:"0" maximum:"360"`
	ObjectType     *string  `json:"object_type,omitempty" maxLength:"100"`
	Aliases        []string `json:"aliases,omitempty" maxItems:"50" doc:"Other names of the source; each unique over every source's names and aliases (case and spaces ignored)."`
	CoordOrigin    string   `json:"-"`
	CoordReference *string  `json:"-"`
}

// Normalize checks a source body beyond its schema: the fields its kind needs and no others,
// names without control characters, aliases distinct from each other and from the name. With
// Resolve set it checks only the name (the resolver fills the rest; ApplyResolved).
func (s *SourceSpec) Normalize() error {
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" {
		return problem.Field("body.name", "must not be blank", nil)
	}
	if hasControl(s.Name) {
		return problem.Field("body.name", "must not contain control characters", nil)
	}
	if s.CoordOrigin == "" {
		s.CoordOrigin = "user"
	}
	if s.Resolve {
		if s.Kind != "" && s.Kind != KindFixed {
			return problem.Field("body.kind", "resolve gives a fixed source; leave kind out", s.Kind)
		}
		for f, v := range map[string]bool{"ra_deg": s.RADeg != nil, "dec_deg": s.DecDeg != nil, "body": s.Body != nil,
			"elevation_deg": s.ElevationDeg != nil, "az_min_deg": s.AzMinDeg != nil, "az_max_deg": s.AzMaxDeg != nil} {
			if v {
				return problem.Field("body."+f, "not allowed with resolve: the resolver gives the coordinates", nil)
			}
		}
		return s.normalizeAliases()
	}
	type field struct {
		name string
		set  bool
	}
	fixed := []field{{"ra_deg", s.RADeg != nil}, {"dec_deg", s.DecDeg != nil}}
	motion := []field{{"pm_ra_mas_yr", s.PMRAMasYr != nil}, {"pm_dec_mas_yr", s.PMDecMasYr != nil}, {"epoch", s.Epoch != nil},
		{"parallax_mas", s.ParallaxMas != nil}, {"radial_velocity_kms", s.RadialVelocity != nil}}
	solar := []field{{"body", s.Body != nil}}
	constEl := []field{{"elevation_deg", s.ElevationDeg != nil}, {"az_min_deg", s.AzMinDeg != nil}, {"az_max_deg", s.AzMaxDeg != nil}}
	var need, allow []field
	switch s.Kind {
	case KindFixed:
		need, allow = fixed, motion
	case KindSolarSystem:
		need = solar
	case KindConstantElevation:
		need = constEl
	case "":
		return problem.Field("body.kind", "required (fixed, solar_system or constant_elevation) unless resolve is true", nil)
	default:
		return problem.Field("body.kind", "must be fixed, solar_system or constant_elevation", s.Kind)
	}
	ok := map[string]bool{}
	for _, f := range need {
		if !f.set {
			return problem.Field("body."+f.name, "required for a "+s.Kind+" source", nil)
		}
		ok[f.name] = true
	}
	for _, f := range allow {
		ok[f.name] = true
	}
	for _, group := range [][]field{fixed, motion, solar, constEl} {
		for _, f := range group {
			if f.set && !ok[f.name] {
				return problem.Field("body."+f.name, "not allowed for a "+s.Kind+" source", nil)
			}
		}
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"ra_deg", s.RADeg}, {"dec_deg", s.DecDeg}, {"pm_ra_mas_yr", s.PMRAMasYr}, {"pm_dec_mas_yr", s.PMDecMasYr},
		{"epoch", s.Epoch}, {"elevation_deg", s.ElevationDeg}, {"az_min_deg", s.AzMinDeg}, {"az_max_deg", s.AzMaxDeg},
		{"parallax_mas", s.ParallaxMas}, {"radial_velocity_kms", s.RadialVelocity}} {
		if p.v != nil && (math.IsNaN(*p.v) || math.IsInf(*p.v, 0)) {
			return problem.Field("body."+p.name, "must be a finite number", nil)
		}
	}
	if s.RADeg != nil && (*s.RADeg < 0 || *s.RADeg >= 360) {
		return problem.Field("body.ra_deg", "must be within [0, 360)", *s.RADeg)
	}
	if s.DecDeg != nil && (*s.DecDeg < -90 || *s.DecDeg > 90) {
		return problem.Field("body.dec_deg", "must be within [-90, 90]", *s.DecDeg)
	}
	if s.Body != nil && !slices.Contains(visibility.Bodies(), *s.Body) {
		return problem.Field("body.body", "must be one of "+strings.Join(visibility.Bodies(), ", "), *s.Body)
	}
	if s.ParallaxMas != nil && (*s.ParallaxMas < 0 || *s.ParallaxMas > 1000) {
		return problem.Field("body.parallax_mas", "must be within [0, 1000] mas", *s.ParallaxMas)
	}
	if s.RadialVelocity != nil && (*s.RadialVelocity < -30000 || *s.RadialVelocity > 30000) {
		return problem.Field("body.radial_velocity_kms", "must be within [-30000, 30000] km/s", *s.RadialVelocity)
	}
	if s.Kind == KindFixed && (s.PMRAMasYr != nil || s.PMDecMasYr != nil) && s.Epoch == nil {
		e := 2000.0
		s.Epoch = &e
	}
	if s.ObjectType != nil {
		t := strings.TrimSpace(*s.ObjectType)
		if hasControl(t) {
			return problem.Field("body.object_type", "must not contain control characters", nil)
		}
		s.ObjectType = &t
		if t == "" {
			s.ObjectType = nil
		}
	}
	return s.normalizeAliases()
}

func (s *SourceSpec) normalizeAliases() error {
	seen := map[string]bool{NameKey(s.Name): true} // the name and the aliases kept so far
	var out []string
	for i, a := range s.Aliases {
		a = strings.TrimSpace(a)
		f := fmt.Sprintf("aliases[%d]", i)
		switch {
		case a == "":
			return problem.Field("body."+f, "must not be blank", nil)
		case len(a) > 255:
			return problem.Field("body."+f, "at most 255 characters", nil)
		case hasControl(a):
			return problem.Field("body."+f, "must not contain control characters", nil)
		}
		k := NameKey(a)
		if seen[k] {
			continue // the name itself or an earlier alias: nothing to add
		}
		seen[k] = true
		out = append(out, a)
	}
	s.Aliases = out
	return nil
}

// ApplyResolved fills a resolve=true source from the resolver's answer: a fixed source at its
// coordinates, its object type, and its names as aliases (besides the source's own name).
func (s *SourceSpec) ApplyResolved(ra, dec float64, objectType, resolver, reference string, aliases []string) {
	s.Kind = KindFixed
	s.RADeg, s.DecDeg = &ra, &dec
	if objectType != "" && s.ObjectType == nil {
		t := objectType
		s.ObjectType = &t
	}
	s.CoordOrigin = resolver
	if reference != "" {
		r := reference
		s.CoordReference = &r
	}
	s.Aliases = append(s.Aliases, aliases...)
	_ = s.normalizeAliases()
	if len(s.Aliases) > MaxAliases {
		s.Aliases = s.Aliases[:MaxAliases]
	}
}

// NameKey is the form under which names and aliases are unique and searched: lower case with
// white space removed (the same expression as source_aliases.alias_key in the database).
func NameKey(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), ""))
}

// SourceQuery filters and pages the source list; with a cone (RA, Dec and radius all set)
// results are sorted by distance from its centre.
type SourceQuery struct {
	Q                     string
	Kind                  string
	ProgramID             int64
	RADeg, DecDeg, Radius *float64
	Limit, Offset         int
}

// Chip is the compact card of a source (GET /sources/{id}/chip).
type Chip struct {
	ID            int64        `json:"id"`
	Name          string       `json:"name"`
	Kind          string       `json:"kind"`
	RADeg         *float64     `json:"ra_deg" doc:"ICRS RA; for a solar-system body its current geocentric position."`
	DecDeg        *float64     `json:"dec_deg"`
	RAHMS         string       `json:"ra_hms,omitempty" example:"05h35m14.10s"`
	DecDMS        string       `json:"dec_dms,omitempty" example:"-05d22m30.0s"`
	ObjectType    *string      `json:"object_type"`
	AltDeg        float64      `json:"alt_deg" doc:"Current elevation from the site: geometric, refracted with OPS_SITE_REFRACTION=true."`
	AzDeg         float64      `json:"az_deg" doc:"Current azimuth, from north through east."`
	SunSepDeg     float64      `json:"sun_sep_deg" doc:"Current angular distance from the Sun (a constant-elevation scan: its closest point)."`
	ObservableNow bool         `json:"observable_now" doc:"Elevation within the site limits and outside the Sun avoidance radius now."`
	At            time.Time    `json:"at" doc:"When alt/az were computed (UTC)."`
	Programs      []ProgramRef `json:"programs" doc:"Programs with obs units on this source."`
	Limits        ChipLimits   `json:"limits"`
}

// ChipLimits are the limits observable_now was judged by.
type ChipLimits struct {
	MinElevationDeg float64 `json:"min_elevation_deg"`
	MaxElevationDeg float64 `json:"max_elevation_deg"`
	SunAvoidanceDeg float64 `json:"sun_avoidance_deg"`
}

// ProgramRef names a program.
type ProgramRef struct {
	ID        int64  `json:"id" db:"id"`
	ShortName string `json:"short_name" db:"short_name"`
}

// SourceDetails is the full record of a source with the obs units that use it.
type SourceDetails struct {
	Source
	Provenance string             `json:"provenance" doc:"Where the coordinates came from, in words."`
	ObsUnits   []SourceObsUnitRef `json:"obs_units"`
}

// SourceObsUnitRef is an obs unit using a source, with its program.
type SourceObsUnitRef struct {
	ObsUnit
	Program ProgramRef `json:"program"`
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
