package catalog

import (
	"context"
	"log/slog"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/resolve"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// Store is the catalog's storage (postgres.Store implements it): programs, sources and
// instruments, and the reads the visibility use cases need.
type Store interface {
	// Instruments lists every instrument with its modules, by id.
	Instruments(ctx context.Context) ([]Instrument, error)
	// Instrument returns one instrument (an error wrapping problem.ErrNotFound if unknown).
	Instrument(ctx context.Context, id int) (Instrument, error)

	// ListPrograms returns one page of the programs matching q.
	ListPrograms(ctx context.Context, q ProgramQuery) (Page[Program], error)
	// GetProgram returns one program with its obs units.
	GetProgram(ctx context.Context, id int64) (Program, error)
	// CreateProgram stores a normalized program with its obs units, created by by.
	CreateProgram(ctx context.Context, spec ProgramSpec, by string) (Program, error)
	// ReplaceProgram locks a program, writes what build makes of it as it is then (fields,
	// members, and, when the spec's ObsUnits is not nil, its units); guard is called with the ids
	// of the units it deletes before it commits (DeleteGuard).
	ReplaceProgram(ctx context.Context, id int64, build ProgramBuilder, guard DeleteGuard) (Program, error)
	// DeleteProgram locks a program, asks check whether it may go, deletes it and its obs units,
	// calling guard with their ids before it commits; an *ExecutionsConflictError when executions
	// reference them.
	DeleteProgram(ctx context.Context, id int64, check func(cur Program) error, guard DeleteGuard) error
	// ObsUnit returns one obs unit (an error wrapping problem.ErrNotFound if unknown).
	ObsUnit(ctx context.Context, id int64) (ObsUnit, error)
	// ExecutionsOf lists the committed executions of obs units (at most 100).
	ExecutionsOf(ctx context.Context, obsUnitIDs []int64) ([]ExecutionRef, error)

	// ListSources returns one page of the sources matching q (by distance with a cone).
	ListSources(ctx context.Context, q SourceQuery) (Page[Source], error)
	// GetSource returns one source with its aliases.
	GetSource(ctx context.Context, id int64) (Source, error)
	// CreateSource stores a normalized source with its aliases, created by by.
	CreateSource(ctx context.Context, spec SourceSpec, by string) (Source, error)
	// ImportSources stores normalized sources with their aliases in one transaction, created by
	// by, unless a name or alias is taken (then taken lists them and nothing is stored) or dryRun.
	ImportSources(ctx context.Context, specs []SourceSpec, by string, dryRun bool) (ids []int64, taken []TakenName, err error)
	// ReplaceSource locks a source, asks check with its owners (SourceOwners) whether it may
	// change, and replaces its fields and aliases.
	ReplaceSource(ctx context.Context, id int64, spec SourceSpec, check func(SourceOwners) error) (Source, error)
	// DeleteSource locks a source, asks check with its owners, and deletes it and its aliases
	// (a *ConflictError while obs units use it).
	DeleteSource(ctx context.Context, id int64, check func(SourceOwners) error) error
	// ProgramsUsing names the programs with obs units on a source.
	ProgramsUsing(ctx context.Context, sourceID int64) ([]ProgramRef, error)
	// ObsUnitsUsing lists the obs units on a source with their programs.
	ObsUnitsUsing(ctx context.Context, sourceID int64) ([]SourceObsUnitRef, error)

	// EngineSource reads one source as the visibility engine needs it.
	EngineSource(ctx context.Context, id int64) (precalc.Source, error)
	// EngineSources reads sources by id, in the order given; missing lists unknown ids.
	EngineSources(ctx context.Context, ids []int64) (found []precalc.Source, missing []int64, err error)
	// ProgramEngineSources reads the distinct sources of a program's obs units, by id.
	ProgramEngineSources(ctx context.Context, programID int64) ([]precalc.Source, error)
	// ProgramSourceIDs lists the distinct source ids of a program's obs units.
	ProgramSourceIDs(ctx context.Context, programID int64) ([]int64, error)
	// AllSourceIDs lists every source id.
	AllSourceIDs(ctx context.Context) ([]int64, error)
	// PrecalcJob reads a precalculation job.
	PrecalcJob(ctx context.Context, id int64) (precalc.Job, error)

	// ExecutedTime sums the committed, completed executions of obs units, by obs unit id (units
	// without any are absent).
	ExecutedTime(ctx context.Context, obsUnitIDs []int64) (map[int64]ExecutedTime, error)
	// ActiveObsUnits reads every obs unit of the active programs with its program, its source as
	// the engine needs it and its executed time, by obs unit id.
	ActiveObsUnits(ctx context.Context) ([]ActiveObsUnit, error)
}

// WeatherLoader loads the PWV series over a range as of now (weather.Store).
type WeatherLoader interface {
	Load(ctx context.Context, from, to, now time.Time) (*weather.Series, error)
}

// Resolver resolves names (or coordinate strings) to positions, one answer per input in input
// order (resolve.Resolver).
type Resolver interface {
	Resolve(ctx context.Context, names []string) ([]resolve.Answer, error)
	// OnlineState says whether names found nowhere else are asked online (resolve.OnlineEnabled
	// or resolve.OnlineDisabled).
	OnlineState() string
}

// Caller is who asks for a use case: the user behind an authenticated request.
type Caller struct {
	Name  string // recorded as created_by / requested_by
	Admin bool
}

// CallerOf returns the Caller of an authenticated request (the zero Caller for none).
func CallerOf(p *authn.Principal) Caller {
	if p == nil {
		return Caller{}
	}
	return Caller{Name: p.Username, Admin: p.IsAdmin()}
}

// Service is the catalog's use cases: instruments, programs, sources, name resolution and
// visibility (visibility.go). Access to each route is already decided by the access table;
// the rules of what may be written and what is answered live here.
type Service struct {
	Store    Store
	Resolver Resolver
	Site     *visibility.Site // the observatory and its limits (source chip, visibility)
	Heatmaps *precalc.Service // heatmap cache and precalculation queue
	// Executions asks ingest about buffered executions before obs units are deleted
	// (deletes.go); nil: obs units cannot be deleted (503).
	Executions Executions
	// Pending asks ingest for acknowledged executions not yet committed (accounting.go); nil:
	// programs are answered without pending time.
	Pending PendingExecutions
	// Weather reads the site's PWV series for obs units' PWV limits (weather.Store on the
	// site_weather table, read-only); nil: the PWV is unknown.
	Weather WeatherLoader
	Now     func() time.Time // the clock of the chip's alt/az and of the PWV's past and future (time.Now when nil)
	Log     *slog.Logger
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// kindedError is a domain error of a problem kind whose text is the problem's detail.
type kindedError struct {
	kind problem.Kind
	msg  string
}

func (e *kindedError) Error() string             { return e.msg }
func (e *kindedError) ProblemKind() problem.Kind { return e.kind }

// PageQuery is the paging of a list.
type PageQuery struct {
	Limit, Offset int
}

// ListInstruments returns one page of the instruments, by id.
func (s *Service) ListInstruments(ctx context.Context, q PageQuery) (Page[Instrument], error) {
	all, err := s.Store.Instruments(ctx)
	if err != nil {
		return Page[Instrument]{}, err
	}
	page := Page[Instrument]{Items: []Instrument{}, Total: len(all), Limit: q.Limit, Offset: q.Offset}
	if q.Offset < len(all) {
		page.Items = all[q.Offset:min(len(all), q.Offset+q.Limit)]
	}
	return page, nil
}

// GetInstrument returns one instrument with its modules.
func (s *Service) GetInstrument(ctx context.Context, id int) (Instrument, error) {
	return s.Store.Instrument(ctx, id)
}
