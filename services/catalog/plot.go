package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// Limits of an altitude plot (GET /visibility/plot): a night or a few, a handful of sources.
const (
	MaxPlotSources = 10
	MaxPlotRange   = 72 * time.Hour
	MaxPlotSamples = 2000
	// DefaultPlotStep is the sampling of a plot's curves unless step_s is given.
	DefaultPlotStep = 5 * time.Minute
)

// PlotQuery asks for the altitude plot of 1-MaxPlotSources sources over a range (default: the
// 24 h from now), optionally with a lower elevation limit, and an obs unit whose constraints apply
// to its source's windows (the source must be on the plot).
type PlotQuery struct {
	SourceIDs       []int64
	Start, End      string
	StepS           int64
	MinElevationDeg *float64
	ObsUnitID       int64
}

// PlotUnit is an obs unit's constraints applied to its source on a plot (with the weather series
// for a PWV limit).
type PlotUnit struct {
	ObsUnit *ObsUnit
	Weather *weather.Series
}

// PlotSource is one source of a plot with its visibility on the plot's grid.
type PlotSource struct {
	Source precalc.Source
	Result *visibility.Result
}

// PlotData is what an altitude plot draws: the sources, and the Sun, the Moon and the LST on
// the same grid.
type PlotData struct {
	Start, End time.Time
	Step       time.Duration
	Sources    []PlotSource
	Sky        []visibility.SkySample
	// ObsUnit is the obs unit whose constraints shaped its source's windows (nil: none).
	ObsUnit *ObsUnit
}

// Plot computes the data of an altitude plot: one read for every source, the engine's fast
// tracks for the curves, windows and Sun avoidance.
func (s *Service) Plot(ctx context.Context, q PlotQuery) (PlotData, error) {
	switch {
	case len(q.SourceIDs) == 0:
		return PlotData{}, problem.Field("query.source_id", "give 1-10 source ids (source_id=1&source_id=2)", nil)
	case len(q.SourceIDs) > MaxPlotSources:
		return PlotData{}, problem.Field("query.source_id", fmt.Sprintf("at most %d sources on one plot", MaxPlotSources), len(q.SourceIDs))
	}
	seen := map[int64]bool{}
	for _, id := range q.SourceIDs {
		if id < 1 {
			return PlotData{}, problem.Field("query.source_id", "source ids are positive", id)
		}
		if seen[id] {
			return PlotData{}, problem.Field("query.source_id", "each source once", id)
		}
		seen[id] = true
	}
	start := time.Now().UTC().Truncate(time.Minute)
	var err error
	if q.Start != "" {
		if start, err = parseTime("start", q.Start); err != nil {
			return PlotData{}, err
		}
	}
	end := start.Add(24 * time.Hour)
	if q.End != "" {
		if end, err = parseTime("end", q.End); err != nil {
			return PlotData{}, err
		}
	}
	step := DefaultPlotStep
	if q.StepS > 0 {
		step = time.Duration(q.StepS) * time.Second
	}
	switch {
	case !end.After(start):
		return PlotData{}, problem.Field("query.end", "must be after start", q.End)
	case end.Sub(start) > MaxPlotRange:
		return PlotData{}, problem.Field("query.end", "a plot spans at most 72 hours", q.End)
	case start.Year() < minYear || end.Year() > maxYear:
		return PlotData{}, problem.Field("query.start", "times must lie within 1900–2100 (the ephemerides' span)", q.Start)
	}
	if n := visibility.SampleCount(start, end, step); n > MaxPlotSamples {
		return PlotData{}, problem.Field("query.step_s", fmt.Sprintf("the range gives %d samples at this step; at most %d", n, MaxPlotSamples), q.StepS)
	}
	srcs, missing, err := s.Store.EngineSources(ctx, q.SourceIDs)
	if err != nil {
		return PlotData{}, err
	}
	if len(missing) > 0 {
		return PlotData{}, fmt.Errorf("no source with id %v: %w", missing, problem.ErrNotFound)
	}
	var unit *PlotUnit
	if q.ObsUnitID != 0 {
		u, wx, _, err := s.unitConstraints(ctx, q.ObsUnitID, start, end)
		if err != nil {
			return PlotData{}, err
		}
		if !seen[u.SourceID] {
			return PlotData{}, problem.Field("query.obs_unit_id", fmt.Sprintf("this obs unit observes source %d, which is not on the plot (add source_id=%d)", u.SourceID, u.SourceID), q.ObsUnitID)
		}
		unit = &PlotUnit{ObsUnit: u, Weather: wx}
	}
	return ComputePlot(s.Site, srcs, start, end, step, q.MinElevationDeg, unit)
}

// ComputePlot computes a plot's data for sources already read (the bench calls it directly); unit
// (optional) applies an obs unit's constraints to its source.
func ComputePlot(site *visibility.Site, srcs []precalc.Source, start, end time.Time, step time.Duration, minEl *float64, unit *PlotUnit) (PlotData, error) {
	d := PlotData{Start: start, End: end, Step: step}
	for _, src := range srcs {
		if err := src.Source.Validate(); err != nil {
			return PlotData{}, &kindedError{problem.Invalid, fmt.Sprintf("source %d's coordinates cannot be computed: %v", src.ID, err)}
		}
		req := visibility.Request{Start: start, End: end, Step: step, MinElevationDeg: minEl}
		if unit != nil && unit.ObsUnit.SourceID == src.ID {
			req.Constraints, req.Weather, d.ObsUnit = unit.ObsUnit.Constraints(), unit.Weather, unit.ObsUnit
		}
		res := visibility.Compute(site, &src.Source, req)
		d.Sources = append(d.Sources, PlotSource{Source: src, Result: res})
	}
	d.Sky = visibility.Sky(site, start, end, step)
	return d, nil
}
