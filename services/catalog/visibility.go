package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// Limits of the visibility use cases.
const (
	MaxVisibilitySamples = 10_000
	MaxVisibilityRange   = 1100 * 24 * time.Hour // about three years
	MaxHeatmapSources    = 5000
	minYear, maxYear     = 1900, 2100 // the span of SOFA's Moon and planet ephemerides
)

// VisibilityQuery asks for the visibility of a source over a range, as the query gave it.
type VisibilityQuery struct {
	SourceID        int64
	Start, End      string   // RFC 3339; empty: now (to the second), and start + 24 h
	StepS           int64    // seconds between samples
	MinElevationDeg *float64 // a lower elevation limit instead of the site's (and the obs unit's)
	ObsUnitID       int64    // an obs unit of the source whose constraints apply (0: none)
}

// SourceVisibility is the visibility of a source over a range.
type SourceVisibility struct {
	Source     precalc.Source
	Start, End time.Time
	Result     *visibility.Result
	// ObsUnit is the obs unit whose constraints were applied (nil: the site's only).
	ObsUnit *ObsUnit
	// SunAvoidanceDeg is the Sun avoidance applied: the obs unit's min_sun_separation_deg or the site's.
	SunAvoidanceDeg float64
	// WeatherAsOf is the instant dividing measured from forecast PWV (with a PWV limit).
	WeatherAsOf *time.Time
}

// WeatherSpan is how far either side of now a PWV limit reads the weather series: older
// measurements are not consulted and later forecasts do not exist; beyond it the PWV is unknown.
const WeatherSpan = weather.MaxRange

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, problem.Field("query."+field, "must be an RFC 3339 time, e.g. 2026-05-01T00:00:00Z", s)
	}
	return t.UTC(), nil
}

// SourceVisibility computes where a source is in the site's sky over a range (at most
// MaxVisibilityRange and MaxVisibilitySamples samples, within the ephemerides' years), with
// its observable windows.
func (s *Service) SourceVisibility(ctx context.Context, q VisibilityQuery) (SourceVisibility, error) {
	start := time.Now().UTC().Truncate(time.Second)
	var err error
	if q.Start != "" {
		if start, err = parseTime("start", q.Start); err != nil {
			return SourceVisibility{}, err
		}
	}
	end := start.Add(24 * time.Hour)
	if q.End != "" {
		if end, err = parseTime("end", q.End); err != nil {
			return SourceVisibility{}, err
		}
	}
	step := time.Duration(q.StepS) * time.Second
	switch {
	case end.Before(start):
		return SourceVisibility{}, problem.Field("query.end", "must not be before start", q.End)
	case end.Sub(start) > MaxVisibilityRange:
		return SourceVisibility{}, problem.Field("query.end", "the range may span at most 1100 days", q.End)
	case start.Year() < minYear || end.Year() > maxYear:
		return SourceVisibility{}, problem.Field("query.start", "times must lie within 1900–2100 (the ephemerides' span)", q.Start)
	}
	if n := visibility.SampleCount(start, end, step); n > MaxVisibilitySamples {
		return SourceVisibility{}, problem.Field("query.step_s",
			fmt.Sprintf("the range gives %d samples at this step; at most %d (use a larger step_s or a shorter range)", n, MaxVisibilitySamples), q.StepS)
	}
	src, err := s.Store.EngineSource(ctx, q.SourceID)
	if err != nil {
		return SourceVisibility{}, err
	}
	if err := src.Source.Validate(); err != nil {
		return SourceVisibility{}, &kindedError{problem.Invalid, "this source's coordinates cannot be computed: " + err.Error()}
	}
	req := visibility.Request{Start: start, End: end, Step: step, MinElevationDeg: q.MinElevationDeg}
	out := SourceVisibility{Source: src, Start: start, End: end, SunAvoidanceDeg: s.Site.SunAvoidanceDeg}
	if q.ObsUnitID != 0 {
		u, wx, now, err := s.unitConstraints(ctx, q.ObsUnitID, start, end)
		if err != nil {
			return SourceVisibility{}, err
		}
		if u.SourceID != q.SourceID {
			return SourceVisibility{}, problem.Field("query.obs_unit_id", fmt.Sprintf("this obs unit observes source %d, not %d", u.SourceID, q.SourceID), q.ObsUnitID)
		}
		out.ObsUnit, out.WeatherAsOf = u, now
		req.Constraints, req.Weather = u.Constraints(), wx
		if u.MinSunSeparationDeg != nil {
			out.SunAvoidanceDeg = *u.MinSunSeparationDeg
		}
	}
	out.Result = visibility.Compute(s.Site, &src.Source, req)
	return out, nil
}

// unitConstraints reads the obs unit (query.obs_unit_id) whose constraints a visibility over
// [start, end] applies, and, when it has a PWV limit, the weather series with the instant
// dividing measured from forecast PWV.
func (s *Service) unitConstraints(ctx context.Context, id int64, start, end time.Time) (*ObsUnit, *weather.Series, *time.Time, error) {
	u, err := s.Store.ObsUnit(ctx, id)
	if errors.Is(err, problem.ErrNotFound) {
		return nil, nil, nil, problem.Field("query.obs_unit_id", "no obs unit with this id", id)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if u.MaxPWVmm == nil {
		return &u, nil, nil, nil
	}
	now := s.now()
	wx, err := s.loadWeather(ctx, start, end, now)
	if err != nil {
		return nil, nil, nil, err
	}
	return &u, wx, &now, nil
}

// loadWeather reads the PWV series over [start, end] clipped to WeatherSpan around now (an empty
// series when nothing of the range is within it, or without a weather store).
func (s *Service) loadWeather(ctx context.Context, start, end, now time.Time) (*weather.Series, error) {
	from, to := maxTime(start, now.Add(-WeatherSpan)), minTime(end, now.Add(WeatherSpan))
	if s.Weather == nil || to.Before(from) {
		return weather.NewSeries(nil, now), nil
	}
	wx, err := s.Weather.Load(ctx, from, to, now)
	if err != nil {
		return nil, err
	}
	return wx, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// HeatmapQuery asks for a year's heatmap of a program's sources or of a list of source ids
// (the query's comma-separated string).
type HeatmapQuery struct {
	Year      int
	ProgramID int64
	SourceIDs string
}

// Heatmap is hours observable per source per UTC day of a year, with the sources it was asked for.
type Heatmap struct {
	*precalc.Heatmap
	ProgramID *int64
	SourceIDs []int64
}

// Heatmap answers a year's heatmap from the cache; a few uncached sources are computed on the
// spot, more answer 404 saying how to precalculate them.
func (s *Service) Heatmap(ctx context.Context, q HeatmapQuery) (Heatmap, error) {
	if (q.ProgramID == 0) == (q.SourceIDs == "") {
		return Heatmap{}, problem.Field("query.program_id", "give either program_id or source_ids", nil)
	}
	var out Heatmap
	var srcs []precalc.Source
	if q.ProgramID != 0 {
		out.ProgramID = &q.ProgramID
		var err error
		if srcs, err = s.Store.ProgramEngineSources(ctx, q.ProgramID); err != nil {
			return Heatmap{}, err
		}
		srcs = srcs[:min(len(srcs), MaxHeatmapSources)]
	} else {
		ids, err := parseIDs("query.source_ids", q.SourceIDs)
		if err != nil {
			return Heatmap{}, err
		}
		var missing []int64
		if srcs, missing, err = s.Store.EngineSources(ctx, ids); err != nil {
			return Heatmap{}, err
		}
		if len(missing) > 0 {
			return Heatmap{}, fmt.Errorf("no source with id %v: %w", missing, problem.ErrNotFound)
		}
	}
	out.SourceIDs = make([]int64, len(srcs))
	for i := range srcs {
		out.SourceIDs[i] = srcs[i].ID
	}
	hm, err := s.Heatmaps.Get(ctx, q.Year, srcs)
	var nc *precalc.NotCachedError
	if errors.As(err, &nc) {
		how := fmt.Sprintf(`{"year": %d, "source_ids": [...]}`, q.Year)
		if q.ProgramID != 0 {
			how = fmt.Sprintf(`{"year": %d, "program_id": %d}`, q.Year, q.ProgramID)
		}
		return Heatmap{}, &kindedError{problem.NotFound, fmt.Sprintf("%s. An admin computes it with POST /visibility/precalculate %s and follows "+
			"GET /visibility/precalculate/{job_id}; or ask for at most %d uncached sources at a time.", nc.Error(), how, nc.SyncMax)}
	}
	if err != nil {
		return Heatmap{}, err
	}
	out.Heatmap = hm
	return out, nil
}

// parseIDs reads comma-separated positive ids, each once, at most MaxHeatmapSources.
func parseIDs(field, s string) ([]int64, error) {
	var ids []int64
	seen := map[int64]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, err := strconv.ParseInt(part, 10, 64)
		if err != nil || id < 1 {
			return nil, problem.Field(field, "must be comma-separated positive integer ids", part)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > MaxHeatmapSources {
		return nil, problem.Field(field, fmt.Sprintf("at most %d sources", MaxHeatmapSources), nil)
	}
	return ids, nil
}

// PrecalcRequest asks for the precalculation of a year's heatmaps: exactly one of a program's
// sources, a list of sources, or all sources.
type PrecalcRequest struct {
	Year      int
	ProgramID *int64
	SourceIDs []int64
	All       bool
}

// Precalculate queues (or finds queued) the precalculation of a year's heatmaps. Admins only:
// the access table already admits admins only; checked again here, where the work is done.
func (s *Service) Precalculate(ctx context.Context, caller Caller, r PrecalcRequest) (precalc.Job, error) {
	if !caller.Admin {
		return precalc.Job{}, &kindedError{problem.Forbidden, "precalculation is for admins"}
	}
	n := 0
	for _, set := range []bool{r.ProgramID != nil, r.SourceIDs != nil, r.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return precalc.Job{}, problem.Field("body", "give exactly one of program_id, source_ids or all: true", nil)
	}
	var ids []int64
	var err error
	switch {
	case r.ProgramID != nil:
		ids, err = s.Store.ProgramSourceIDs(ctx, *r.ProgramID)
	case r.All:
		ids, err = s.Store.AllSourceIDs(ctx)
	default:
		seen := map[int64]bool{}
		for i, id := range r.SourceIDs {
			if id < 1 {
				return precalc.Job{}, problem.Field(fmt.Sprintf("body.source_ids[%d]", i), "must be a positive id", id)
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		var missing []int64
		if _, missing, err = s.Store.EngineSources(ctx, ids); err == nil && len(missing) > 0 {
			return precalc.Job{}, problem.Field("body.source_ids", "unknown source ids", missing)
		}
	}
	if err != nil {
		return precalc.Job{}, err
	}
	job, err := s.Heatmaps.Enqueue(ctx, r.Year, ids, caller.Name)
	if errors.Is(err, precalc.ErrTooManyJobs) {
		return precalc.Job{}, problem.Unavailable.New(err.Error()).WithHeader("Retry-After", "60")
	}
	if err != nil && !database.MainUnreachable(err) && !database.AtMainOnly(err) { // the job is recorded at the main site: its own 503 or 409
		s.Log.ErrorContext(ctx, "visibility precalculation not queued", "error", err)
		return precalc.Job{}, &kindedError{problem.Unavailable, "the precalculation could not be queued; try again"}
	}
	return job, err
}

// PrecalculationJob returns a precalculation job with its progress.
func (s *Service) PrecalculationJob(ctx context.Context, id int64) (precalc.Job, error) {
	return s.Store.PrecalcJob(ctx, id)
}
