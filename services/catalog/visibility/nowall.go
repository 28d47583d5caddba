package visibility

import (
	"math"
	"runtime"
	"sync"
	"time"
)

// "What to observe now" (GET /visibility/now): every obs unit evaluated at one instant, with how
// long it stays observable or when it next becomes so. Computed for thousands of units at once:
//
//   - now: the full SOFA pipeline at t (Full's arithmetic), its source-independent part computed
//     once (instant) — exactly the windows' test, as At;
//   - until when: each unit's constraint margins followed on a fast track (Track, on one node
//     table shared by every unit) by safe steps: a margin m ≥ 0 changing at most r per second
//     cannot cross zero sooner than m/r, so the unit is stepped by the smallest m/r of its margins
//     (the first edge cannot be skipped) until the step is small, then the edge is bracketed and
//     root-found as the windows' edges are. A unit not observable now is stepped by the largest
//     |m|/r of its failing margins (all must be met before it is observable) to its next window.
//     About 10–20 track evaluations a unit instead of a 10-minute grid over the horizon.
//
// NowOne is the same question answered naively (Compute over the horizon for the one unit): the
// reference of the tests and the baseline of the benchmark.

// NowUnit is one obs unit to evaluate: its source and its own elevation limit (nil: the site's).
type NowUnit struct {
	Source          Source
	MinElevationDeg *float64
}

// NowState is an obs unit at an instant: where its source is, whether it is observable, until
// when (observable) or from when (not), and why.
type NowState struct {
	// AltDeg, AzDeg, SunSepDeg: the position at the instant (as At).
	AltDeg, AzDeg, SunSepDeg float64
	Observable               bool
	// Failing names the constraints not met at the instant (Constraint* names), in a fixed order.
	Failing []string
	// Until is the end of the window the unit is in (observable), EndReason why it ends
	// (ReasonRangeEnd: it lasts at least to the horizon). Nil when not observable.
	Until     *time.Time
	EndReason string
	// Next is the start of the next window within the horizon (not observable now), StartReason
	// why it starts; nil when there is none.
	Next        *time.Time
	StartReason string
}

// Constraint names of the site-level margins (Failing).
const (
	ConstraintMinElevation  = "min_elevation_deg"
	ConstraintMaxElevation  = "max_elevation_deg"
	ConstraintSunSeparation = "min_sun_separation_deg"
)

// marginNames are the margins' constraint names, by margin index.
var marginNames = [...]string{ConstraintMinElevation, ConstraintMaxElevation, ConstraintSunSeparation}

// Safe-step bounds: how fast each margin can change (per second), by source kind. The altitude of
// any direction changes by at most ω cos φ ≤ ω (7.29e-5 rad/s), bodies move a little more; a
// fixed source's distance from the Sun changes by the Sun's motion (~1°/day), a body's by its
// own and the Sun's (the Moon: ~0.6°/h with parallax); a constant-elevation scan's distance from
// the Sun by the Sun's diurnal motion (≤ ω). The bounds keep 10 % and more in hand (refraction).
const (
	altRate      = 8.1e-5 // rad/s
	sunRateFixed = 5e-7
	sunRateBody  = 6e-6
	// nowMinStep: below this a safe step is replaced by a bracket of this width, whose sign change
	// is root-found (a margin going negative and back within it is missed: not in practice).
	nowMinStep = 120.0
)

func marginRates(src *Source) [3]float64 {
	switch src.Kind {
	case KindFixed:
		return [3]float64{altRate, altRate, sunRateFixed}
	case KindSolarSystem:
		return [3]float64{altRate, altRate, sunRateBody}
	default:
		return [3]float64{altRate, altRate, altRate}
	}
}

// NowAll evaluates every unit at t, looking ahead horizon for the ends and starts of windows. Units
// must be valid. Parallel over the available cores.
func NowAll(site *Site, units []NowUnit, t time.Time, horizon time.Duration) []NowState {
	out := make([]NowState, len(units))
	if len(units) == 0 {
		return out
	}
	u0 := Unix(t)
	u1 := u0 + horizon.Seconds()
	in := newInstant(site, t)
	var bodies []int
	for i := range units {
		if units[i].Source.Kind == KindSolarSystem {
			bodies = append(bodies, planets[units[i].Source.Body])
		}
	}
	tab := newNodes(u0, u1, bodies...)
	obs := newObserver(site)
	workers := min(runtime.GOMAXPROCS(0), (len(units)+63)/64)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(units); i += workers {
				out[i] = nowState(site, in, tab, obs, &units[i], u0, u1)
			}
		})
	}
	wg.Wait()
	return out
}

func nowState(site *Site, in *instant, tab *nodes, obs *observer, unit *NowUnit, u0, u1 float64) NowState {
	src := &unit.Source
	alt, az, sunSep := in.position(src)
	c := newConstraints(site, unit.MinElevationDeg)
	m := c.margins(Point{Alt: alt * deg, Az: az * deg, SunSep: sunSep * deg})
	st := NowState{AltDeg: alt, AzDeg: math.Mod(az+360, 360), SunSepDeg: sunSep, Observable: c.ok(m)}
	for k := range m {
		if m[k] < 0 {
			st.Failing = append(st.Failing, marginNames[k])
		}
	}
	tr := newTrackOn(site, src, tab, obs)
	rates := marginRates(src)
	if st.Observable {
		u, reason := nextEnd(tr, &c, rates, m, u0, u1)
		end := FromUnix(u)
		st.Until, st.EndReason = &end, reason
	} else if u, reason, ok := nextStart(tr, &c, rates, m, u0, u1); ok {
		start := FromUnix(u)
		st.Next, st.StartReason = &start, reason
	}
	return st
}

// nextEnd follows an observable unit from u0 (margins m there) to the end of its window: the
// first margin to cross below zero, or u1.
func nextEnd(tr *Track, c *constraints, rates [3]float64, m [3]float64, u0, u1 float64) (float64, string) {
	u := u0
	for u < u1 {
		step := math.Inf(1)
		for k := range m {
			step = math.Min(step, m[k]/rates[k])
		}
		step = math.Max(step, nowMinStep)
		un := math.Min(u+step, u1)
		mn := c.margins(tr.At(un))
		first, kFirst := math.Inf(1), -1
		for k := range mn {
			if mn[k] < 0 && m[k] >= 0 {
				if r := root(tr, c, k, u, m[k], un, mn[k]); r < first {
					first, kFirst = r, k
				}
			}
		}
		if kFirst >= 0 {
			return first, reason(event{margin: kFirst, up: false})
		}
		u, m = un, mn
	}
	return u1, ReasonRangeEnd
}

// nextStart follows a unit that is not observable at u0 (margins m) to the start of its next
// window within u1: where the last failing margin comes back to zero with the others met.
func nextStart(tr *Track, c *constraints, rates [3]float64, m [3]float64, u0, u1 float64) (float64, string, bool) {
	u := u0
	for u < u1 {
		step := 0.0
		for k := range m {
			if m[k] < 0 {
				step = math.Max(step, -m[k]/rates[k])
			}
		}
		step = math.Max(step, nowMinStep)
		un := math.Min(u+step, u1)
		mn := c.margins(tr.At(un))
		if c.ok(mn) {
			last, kLast := math.Inf(-1), -1
			for k := range mn {
				if m[k] < 0 {
					if r := root(tr, c, k, u, m[k], un, mn[k]); r > last {
						last, kLast = r, k
					}
				}
			}
			return last, reason(event{margin: kLast, up: true}), true
		}
		u, m = un, mn
	}
	return 0, "", false
}

// NowOne answers NowAll's question for one unit naively: the position as At, the windows over
// [t, t + horizon] as Compute (a 10-minute grid with root-found edges).
func NowOne(site *Site, unit *NowUnit, t time.Time, horizon time.Duration) NowState {
	return nowOne(site, unit, t, horizon, maxScanStep)
}

// nowOne is NowOne with windows searched on a grid of step seconds (at most 600).
func nowOne(site *Site, unit *NowUnit, t time.Time, horizon time.Duration, step float64) NowState {
	alt, az, sunSep := Full(site, &unit.Source, t)
	c := newConstraints(site, unit.MinElevationDeg)
	m := c.margins(Point{Alt: alt * deg, Az: az * deg, SunSep: sunSep * deg})
	st := NowState{AltDeg: alt, AzDeg: math.Mod(az+360, 360), SunSepDeg: sunSep, Observable: c.ok(m)}
	for k := range m {
		if m[k] < 0 {
			st.Failing = append(st.Failing, marginNames[k])
		}
	}
	res := Compute(site, &unit.Source, Request{Start: t, End: t.Add(horizon), Step: time.Duration(step * float64(time.Second)), MinElevationDeg: unit.MinElevationDeg})
	for _, w := range res.Windows {
		switch {
		case st.Observable && st.Until == nil:
			end := w.End
			st.Until, st.EndReason = &end, w.EndReason
		case !st.Observable && w.Start.After(t):
			start := w.Start
			st.Next, st.StartReason = &start, w.StartReason
		}
		if st.Until != nil || st.Next != nil {
			break
		}
	}
	return st
}
