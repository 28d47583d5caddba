package catalog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// What to observe now (GET /visibility/now, issue 26): every obs unit of the active programs at
// one instant — observable or not and why, until when or from when, its time left — ranked.
//
// The ranking rule (docs/planning.md), in order, each deciding only between units the previous
// ones left equal:
//
//  1. observable now with time remaining before everything else (units not observable, and units
//     whose remaining_s is 0, come after);
//  2. priority, lower values first (as in the demo catalogue: 1 is the most urgent), no priority
//     last;
//  3. the unit whose window ends soonest first (observable: it must be done now or wait); for the
//     others, the one observable soonest first (none within the horizon last);
//  4. the least remaining time first (finish what is nearly done);
//  5. obs unit id.
//
// To change it, edit rankOrder (and its test, TestNowRanking, and docs/planning.md): the rule is
// that one function, over NowItem's fields.

// Limits of GET /visibility/now.
const (
	NowHorizon      = 24 * time.Hour // how far ahead window ends and starts are searched
	NowDefaultLimit = 50
	NowMaxLimit     = 5000
)

// ActiveObsUnit is an obs unit of an active program as the ranking reads it.
type ActiveObsUnit struct {
	Unit             ObsUnit
	ProgramID        int64
	ProgramShortName string
	AllocatedHours   *float64
	Source           visibility.Source
	Executed         ExecutedTime
}

// NowQuery asks for the ranking at At (RFC 3339; empty: now), the first Limit items.
type NowQuery struct {
	At    string
	Limit int
}

// NowItem is one obs unit in the ranking.
type NowItem struct {
	Rank                  int          `json:"rank" doc:"1 is the unit to observe first."`
	ObsUnitID             int64        `json:"obs_unit_id"`
	ObsUnitName           string       `json:"obs_unit_name"`
	ProgramID             int64        `json:"program_id"`
	ProgramShortName      string       `json:"program_short_name"`
	SourceID              int64        `json:"source_id"`
	SourceName            string       `json:"source_name"`
	Priority              *int         `json:"priority" doc:"Lower values first; null ranks after every value."`
	Observable            bool         `json:"observable" doc:"Every constraint of the site and the obs unit is met at the time (a PWV limit without data counts as met, see unknown_constraints)."`
	NotObservableBecause  []string     `json:"not_observable_because" doc:"The constraints not met at the time (obs-unit field names: min_elevation_deg, max_elevation_deg (the site's), min_sun_separation_deg (the unit's or the site's Sun avoidance), max_airmass, min_moon_separation_deg, lst_range, time_windows, max_pwv_mm); empty when observable."`
	UnknownConstraints    []string     `json:"unknown_constraints" doc:"Constraints that could not be checked at the time (max_pwv_mm without a PWV reading)."`
	ObservableUntil       *time.Time   `json:"observable_until" doc:"Observable: when its window ends (at most the horizon, 24 h ahead; until_reason range_end then); null when not observable."`
	ObservableForS        *float64     `json:"observable_for_s" doc:"Seconds from the time to observable_until."`
	UntilReason           string       `json:"until_reason,omitempty" doc:"The constraint that ends the window (a window end reason of GET /visibility/{source_id}; range_end: it lasts at least to the horizon)."`
	NextObservable        *time.Time   `json:"next_observable" doc:"Not observable: when its next window starts within the horizon (null: none within 24 h)."`
	NextReason            string       `json:"next_reason,omitempty" doc:"The constraint whose end starts that window (a window start reason)."`
	AltDeg                float64      `json:"alt_deg"`
	AzDeg                 float64      `json:"az_deg"`
	SunSepDeg             float64      `json:"sun_sep_deg"`
	PWVMarginMM           *float64     `json:"pwv_margin_mm" doc:"max_pwv_mm minus the PWV at the time (negative: too wet); null without a PWV limit or without a reading."`
	PWV                   *weather.PWV `json:"pwv,omitempty" doc:"The PWV reading used (units with max_pwv_mm)."`
	DurationS             float64      `json:"duration_s"`
	ExecutedS             float64      `json:"executed_s" doc:"Seconds of its completed executions committed by ingest."`
	RemainingS            float64      `json:"remaining_s" doc:"duration_s minus executed_s, never below 0."`
	ProgramAllocatedHours *float64     `json:"program_allocated_hours"`
	ProgramExecutedHours  float64      `json:"program_executed_hours"`
	ProgramRemainingHours *float64     `json:"program_remaining_hours" doc:"program_allocated_hours minus program_executed_hours; null without an allocation."`
}

// NowRanking is the ranking of the active programs' obs units at one time.
type NowRanking struct {
	At           time.Time `json:"at"`
	HorizonHours float64   `json:"horizon_hours" doc:"How far ahead window ends and starts are searched."`
	Total        int       `json:"total" doc:"Obs units of active programs (all ranked; items holds the first limit)."`
	Limit        int       `json:"limit"`
	Rule         string    `json:"rule" doc:"The ranking rule in words (docs/planning.md)."`
	Items        []NowItem `json:"items"`
}

// NowRule is the ranking rule in words.
const NowRule = "observable now with time remaining first; then priority (lower first, none last); then the window that ends " +
	"soonest (observable) or starts soonest (not observable); then the least remaining time; then obs unit id"

// rankOrder is the ranking rule (see the comment at the top of this file): negative when a ranks
// before b, positive when after.
func rankOrder(a, b *NowItem) int {
	worth := func(x *NowItem) bool { return x.Observable && x.RemainingS > 0 }
	if wa, wb := worth(a), worth(b); wa != wb {
		if wa {
			return -1
		}
		return 1
	}
	if c := cmpNilLast(a.Priority, b.Priority, cmp.Compare[int]); c != 0 {
		return c
	}
	edge := func(x *NowItem) *time.Time {
		if worth(x) {
			return x.ObservableUntil
		}
		return x.NextObservable
	}
	if c := cmpNilLast(edge(a), edge(b), time.Time.Compare); c != 0 {
		return c
	}
	if c := cmp.Compare(a.RemainingS, b.RemainingS); c != 0 {
		return c
	}
	return cmp.Compare(a.ObsUnitID, b.ObsUnitID)
}

// cmpNilLast orders values by c, with nil last.
func cmpNilLast[T any](a, b *T, c func(x, y T) int) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return c(*a, *b)
}

// VisibilityNow ranks every obs unit of the active programs at q.At (default now).
func (s *Service) VisibilityNow(ctx context.Context, q NowQuery) (NowRanking, error) {
	at := s.now().Truncate(time.Second)
	if q.At != "" {
		var err error
		if at, err = parseTime("at", q.At); err != nil {
			return NowRanking{}, err
		}
		if at.Year() < minYear || at.Add(NowHorizon).Year() > maxYear {
			return NowRanking{}, problem.Field("query.at", "must lie within 1900–2100 (the ephemerides' span)", q.At)
		}
	}
	limit := q.Limit
	if limit == 0 {
		limit = NowDefaultLimit
	}
	if limit < 1 || limit > NowMaxLimit {
		return NowRanking{}, problem.Field("query.limit", fmt.Sprintf("must be within [1, %d]", NowMaxLimit), q.Limit)
	}
	units, err := s.Store.ActiveObsUnits(ctx)
	if err != nil {
		return NowRanking{}, err
	}
	wx, err := s.weatherFor(ctx, units, at)
	if err != nil {
		return NowRanking{}, err
	}
	programS := map[int64]float64{}
	engine := make([]visibility.NowUnit, 0, len(units))
	kept := make([]*ActiveObsUnit, 0, len(units))
	for i := range units {
		u := &units[i]
		programS[u.ProgramID] += u.Executed.Seconds
		if u.Source.Validate() != nil {
			continue // a source the engine cannot compute (none in a valid catalogue): not ranked
		}
		engine = append(engine, visibility.NowUnit{Source: u.Source, Constraints: u.Unit.Constraints()})
		kept = append(kept, u)
	}
	states := visibility.NowAll(s.Site, engine, wx, at, NowHorizon)
	items := make([]NowItem, len(kept))
	for i, u := range kept {
		st := &states[i]
		ut := unitTime(u.Unit.DurationS, u.Executed)
		pt := programTime(u.AllocatedHours, programS[u.ProgramID])
		it := NowItem{ObsUnitID: u.Unit.ID, ObsUnitName: u.Unit.Name, ProgramID: u.ProgramID, ProgramShortName: u.ProgramShortName,
			SourceID: u.Unit.SourceID, SourceName: u.Unit.SourceName, Priority: u.Unit.Priority,
			Observable: st.Observable, NotObservableBecause: orEmpty(st.Failing), UnknownConstraints: orEmpty(st.Unknown),
			AltDeg: st.AltDeg, AzDeg: st.AzDeg, SunSepDeg: st.SunSepDeg, PWVMarginMM: st.PWVMarginMM, PWV: st.PWV,
			DurationS: u.Unit.DurationS, ExecutedS: *ut.ExecutedS, RemainingS: *ut.RemainingS,
			ProgramAllocatedHours: u.AllocatedHours, ProgramExecutedHours: *pt.ExecutedHours, ProgramRemainingHours: pt.RemainingHours}
		if st.Until != nil {
			d := st.Until.Sub(at).Seconds()
			it.ObservableUntil, it.ObservableForS, it.UntilReason = st.Until, &d, st.EndReason
		}
		if st.Next != nil {
			it.NextObservable, it.NextReason = st.Next, st.StartReason
		}
		items[i] = it
	}
	slices.SortFunc(items, func(a, b NowItem) int { return rankOrder(&a, &b) })
	for i := range items {
		items[i].Rank = i + 1
	}
	return NowRanking{At: at, HorizonHours: NowHorizon.Hours(), Total: len(items), Limit: limit, Rule: NowRule,
		Items: items[:min(limit, len(items))]}, nil
}

// weatherFor is the PWV series the units' PWV limits read over the horizon from at, as of now
// (measured before now, forecast after, as GET /visibility/{id}?obs_unit_id=); nil when no unit
// has a PWV limit.
func (s *Service) weatherFor(ctx context.Context, units []ActiveObsUnit, at time.Time) (*weather.Series, error) {
	for i := range units {
		if units[i].Unit.MaxPWVmm != nil {
			return s.loadWeather(ctx, at, at.Add(NowHorizon), s.now())
		}
	}
	return nil, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
