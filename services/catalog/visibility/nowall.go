package visibility

import (
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/obsops/obsops/pkg/weather"
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

// NowUnit is one obs unit to evaluate: its source and its constraints (nil: the site's only).
type NowUnit struct {
	Source      Source
	Constraints *ObsConstraints
}

// NowState is an obs unit at an instant: where its source is, whether it is observable, until
// when (observable) or from when (not), and why.
type NowState struct {
	// AltDeg, AzDeg, SunSepDeg: the position at the instant (as At).
	AltDeg, AzDeg, SunSepDeg float64
	Observable               bool
	// Failing names the constraints not met at the instant (Constraint* names), in Check's order;
	// Unknown those that could not be evaluated (max_pwv_mm without a reading).
	Failing, Unknown []string
	// PWVMarginMM is max_pwv_mm minus the PWV at the instant (negative: too wet); nil without a
	// PWV limit or without a reading. PWV is the reading used (nil without a PWV limit).
	PWVMarginMM *float64
	PWV         *weather.PWV
	// Until is the end of the window the unit is in (observable), EndReason why it ends
	// (ReasonRangeEnd: it lasts at least to the horizon). Nil when not observable.
	Until     *time.Time
	EndReason string
	// Next is the start of the next window within the horizon (not observable now), StartReason
	// why it starts; nil when there is none.
	Next        *time.Time
	StartReason string
}

// marginNames are the margins' constraint names, by margin index (as Check's).
var marginNames = [nMargins]string{ConstraintMinElevation, ConstraintMaxElevation, ConstraintSunSeparation, ConstraintAirmass,
	ConstraintMoonSeparation, ConstraintLSTRange, ConstraintTimeWindows, ConstraintPWV}

// Safe-step bounds: how fast each margin can change (per second), by source kind. The altitude of
// any direction changes by at most ω cos φ ≤ ω (7.29e-5 rad/s), bodies move a little more; a
// fixed source's distance from the Sun changes by the Sun's motion (~1°/day), a body's by its
// own and the Sun's; the distance from the Moon by the Moon's motion (~0.55°/h) and its
// parallax's diurnal change (~0.25°/h); a constant-elevation scan's distances by the Sun's and
// the Moon's diurnal motion (≤ ω). The LST gains 1.0027 hours an hour, a time window's margin a
// second a second. The PWV has no bound: every step stops at the weather series' breaks (between
// two, a reading is constant or a forecast linear, so a sign change shows at the ends), as at the
// LST range's and time windows' edges (constraints.breaks). The bounds keep 10 % and more in hand.
const (
	altRate       = 8.1e-5 // rad/s
	sunRateFixed  = 5e-7
	sunRateBody   = 6e-6
	moonRateFixed = 6e-6
	moonRateBody  = 1e-5
	lstRate       = 1.0028 / 3600 // LST hours per second
	// nowMinStep: below this a safe step is replaced by a bracket of this width, whose sign change
	// is root-found (a margin going negative and back within it is missed: not in practice).
	nowMinStep = 120.0
)

// marginRates are the bounds for a source's margins; 0 for the margins its constraints do not use
// (held constant, they never limit a step).
func marginRates(src *Source, c *constraints) [nMargins]float64 {
	r := [nMargins]float64{mLow: altRate, mHigh: altRate, mSun: altRate, mAirmass: altRate, mMoon: altRate + moonRateBody,
		mLST: lstRate, mTime: 1, mPWV: 0}
	switch src.Kind {
	case KindFixed:
		r[mSun], r[mMoon] = sunRateFixed, moonRateFixed
	case KindSolarSystem:
		r[mSun], r[mMoon] = sunRateBody, moonRateBody
	}
	for k, used := range [nMargins]bool{mLow: true, mHigh: c.useHi, mSun: c.useSun, mAirmass: c.useAirmass, mMoon: c.useMoon,
		mLST: c.useLST, mTime: c.useTime, mPWV: c.usePWV} {
		if !used {
			r[k] = 0
		}
	}
	return r
}

// safeStep is how far a margin m changing at most rate per second is from zero, in seconds
// (infinite for a margin without a bound: the steps stop at its breaks).
func safeStep(m, rate float64) float64 {
	if rate == 0 {
		return math.Inf(1)
	}
	return math.Abs(m) / rate
}

// NowAll evaluates every unit at t, looking ahead horizon for the ends and starts of windows. Units
// must be valid. Parallel over the available cores.
// wx is the PWV series the units' PWV limits read (nil: unknown).
func NowAll(site *Site, units []NowUnit, wx *weather.Series, t time.Time, horizon time.Duration) []NowState {
	out := make([]NowState, len(units))
	if len(units) == 0 {
		return out
	}
	u0 := Unix(t)
	u1 := u0 + horizon.Seconds()
	in := newInstant(site, t)
	moonAlt, moonAz, _ := in.position(&Source{Kind: KindSolarSystem, Body: "moon"})
	seen := map[int]bool{}
	var bodies []int
	add := func(np int) {
		if !seen[np] {
			seen[np] = true
			bodies = append(bodies, np)
		}
	}
	for i := range units {
		if units[i].Source.Kind == KindSolarSystem {
			add(planets[units[i].Source.Body])
		}
		if oc := units[i].Constraints; oc != nil && oc.MinMoonSeparationDeg != nil {
			add(-1) // the Moon's track, shared (newConstraints only reads the table then)
		}
	}
	tab := newNodes(u0, u1, bodies...)
	obs := newObserver(site)
	workers := min(runtime.GOMAXPROCS(0), (len(units)+63)/64)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(units); i += workers {
				out[i] = nowState(site, in, [2]float64{moonAlt * deg, moonAz * deg}, tab, obs, &units[i], wx, u0, u1)
			}
		})
	}
	wg.Wait()
	return out
}

func nowState(site *Site, in *instant, moon [2]float64, tab *nodes, obs *observer, unit *NowUnit, wx *weather.Series, u0, u1 float64) NowState {
	src := &unit.Source
	alt, az, sunSep := in.position(src)
	tr := newTrackOn(site, src, tab, obs)
	c := newConstraints(site, nil, unit.Constraints, wx, src, tr)
	p := Point{Alt: alt * deg, Az: az * deg, SunSep: sunSep * deg}
	m := c.marginsWith(u0, p, c.moonSep(p, moon[0], moon[1]))
	st := stateFrom(&c, m, alt, az, sunSep, u0)
	rates := marginRates(src, &c)
	breaks := c.breaks(site, u0, u1)
	if st.Observable {
		u, reason := nextEnd(tr, &c, rates, breaks, m, u0, u1)
		end := FromUnix(u)
		st.Until, st.EndReason = &end, reason
	} else if u, reason, ok := nextStart(tr, &c, rates, breaks, m, u0, u1); ok {
		start := FromUnix(u)
		st.Next, st.StartReason = &start, reason
	}
	return st
}

// stateFrom is the state at the instant from the margins there.
func stateFrom(c *constraints, m [nMargins]float64, alt, az, sunSep, u float64) NowState {
	st := NowState{AltDeg: alt, AzDeg: math.Mod(az+360, 360), SunSepDeg: sunSep, Observable: c.ok(m)}
	for k := range m {
		if m[k] < 0 {
			st.Failing = append(st.Failing, marginNames[k])
		}
	}
	if c.usePWV {
		pw := c.pwvAt(u)
		st.PWV = &pw
		if pw.PWVmm == nil {
			st.Unknown = append(st.Unknown, ConstraintPWV)
		} else {
			d := c.maxPWV - *pw.PWVmm
			st.PWVMarginMM = &d
		}
	}
	return st
}

// stepTo is the next time to evaluate after u: u + step (at least nowMinStep), but no later than
// the next break (just before it, then at it) or u1.
func stepTo(u, step, u1 float64, breaks []float64) float64 {
	un := math.Min(u+math.Max(step, nowMinStep), u1)
	i := sort.SearchFloat64s(breaks, u)
	for i < len(breaks) && breaks[i] <= u {
		i++
	}
	if i < len(breaks) && breaks[i] < un {
		// just before the break, then at it: a time-only margin that ends there is still met
		// just before (a window closing at the break is seen, however short)
		un = breaks[i]
		if un-breakEps > u {
			un -= breakEps
		}
	}
	return un
}

// breakEps is how long before a break stepTo stops first (s).
const breakEps = 1e-3

// nextEnd follows an observable unit from u0 (margins m there) to the end of its window: the
// first margin to cross below zero, or u1.
func nextEnd(tr *Track, c *constraints, rates [nMargins]float64, breaks []float64, m [nMargins]float64, u0, u1 float64) (float64, string) {
	u := u0
	for u < u1 {
		step := math.Inf(1)
		for k := range m {
			if d, ok := altCrossing(tr, c, k, u); ok {
				step = math.Min(step, d)
			} else {
				step = math.Min(step, safeStep(m[k], rates[k]))
			}
		}
		un := stepTo(u, step, u1, breaks)
		mn := c.margins(un, tr.At(un))
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
func nextStart(tr *Track, c *constraints, rates [nMargins]float64, breaks []float64, m [nMargins]float64, u0, u1 float64) (float64, string, bool) {
	u := u0
	for u < u1 {
		step := 0.0
		for k := range m {
			switch {
			case m[k] >= 0:
			case k == mPWV:
				step = math.Max(step, pwvRecovery(c, u, u1, breaks))
			default:
				if d, ok := altCrossing(tr, c, k, u); ok {
					step = math.Max(step, d)
					continue
				}
				step = math.Max(step, safeStep(m[k], rates[k]))
			}
		}
		un := stepTo(u, step, u1, breaks)
		mn := c.margins(un, tr.At(un))
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

// altSlack is how much earlier than predicted an altitude crossing is looked for (s): the
// prediction holds the apparent place of date fixed and ignores diurnal aberration (both well
// under a second of time), and approximates refraction.
const altSlack = 60.0

// altCrossing predicts, for a fixed source, how long (s) until altitude margin k (the lower limit,
// the upper limit or the airmass limit) next changes sign after u, less altSlack: the direction of
// date at u turning with the Earth at the sidereal rate crosses altitude L at the hour angles ±H,
// cos H = (sin L − sin φ sin δ) / (cos φ cos δ) — setting (or coming back below the upper limit) at
// +H, rising at −H. ok is false for other margins and sources: their safe steps apply. The
// prediction only sets the step: the edge is still found by the margin's sign and root-found.
func altCrossing(tr *Track, c *constraints, k int, u float64) (float64, bool) {
	if tr.src.Kind != KindFixed {
		return 0, false
	}
	var lim float64
	switch {
	case k == mLow:
		lim = c.lo
	case k == mHigh && c.useHi:
		lim = c.hi
	case k == mAirmass && c.useAirmass:
		lim = c.airmassAlt
	default:
		return 0, false
	}
	o := tr.obs
	if (o.refa != 0 || o.refb != 0) && lim < math.Pi/2 { // the geometric altitude observed at lim
		tz := math.Tan(math.Pi/2 - math.Max(lim, 3*deg))
		lim -= o.refa*tz + o.refb*tz*tz*tz
	}
	i, f := tr.tab.at(u)
	var p [3]float64
	for j := range 3 {
		p[j] = (1-f)*tr.cirs[i][j] + f*tr.cirs[i+1][j]
	}
	norm(&p)
	sd, cd := p[2], math.Hypot(p[0], p[1])
	den := o.cphi * cd
	if den < 1e-12 {
		return math.Inf(1), true // at a pole: the altitude does not change
	}
	x := (math.Sin(lim) - o.sphi*sd) / den
	if x <= -1 || x >= 1 {
		return math.Inf(1), true // always above or always below: this margin never changes sign
	}
	H := math.Acos(x)
	h := era(u) + o.elong - math.Atan2(p[1], p[0])
	// the lower limits change sign at +H going down and at −H coming up; the upper limit the
	// other way round: the next of the two crossings either way
	next := math.Min(math.Mod(math.Mod(H-h, 2*math.Pi)+2*math.Pi, 2*math.Pi), math.Mod(math.Mod(-H-h, 2*math.Pi)+2*math.Pi, 2*math.Pi))
	return math.Max(0, next/eraRate-altSlack), true
}

// pwvRecovery is how long a failing PWV margin at u stays failing at least: between two breaks
// the PWV is constant (a measurement), linear (a forecast) or unknown (met), so it recovers where
// the line through the margins just after u and just before the next break crosses zero, or not
// before that break.
func pwvRecovery(c *constraints, u, u1 float64, breaks []float64) float64 {
	const eps = breakEps / 4
	b := stepTo(u, math.Inf(1), u1, breaks)
	ma := c.marginsWith(u+eps, Point{}, 0)[mPWV]
	mb := c.marginsWith(b-eps, Point{}, 0)[mPWV]
	switch {
	case ma >= 0:
		return 0
	case mb < 0:
		return b - u
	}
	return (b - u) * ma / (ma - mb)
}

// NowOne answers NowAll's question for one unit naively: the verdict as Check (the full pipeline
// for the source and the Moon), the windows over [t, t + horizon] as Compute (a 10-minute grid
// with root-found edges).
func NowOne(site *Site, unit *NowUnit, wx *weather.Series, t time.Time, horizon time.Duration) NowState {
	return nowOne(site, unit, wx, t, horizon, maxScanStep)
}

// nowOne is NowOne with windows searched on a grid of step seconds (at most 600).
func nowOne(site *Site, unit *NowUnit, wx *weather.Series, t time.Time, horizon time.Duration, step float64) NowState {
	v := Check(site, &unit.Source, unit.Constraints, wx, t)
	c := newConstraints(site, nil, unit.Constraints, wx, &unit.Source, nil)
	m := c.marginsWith(Unix(t), Point{Alt: v.AltDeg * deg, Az: v.AzDeg * deg, SunSep: v.SunSepDeg * deg}, v.MoonSepDeg*deg)
	st := stateFrom(&c, m, v.AltDeg, v.AzDeg, v.SunSepDeg, Unix(t))
	res := Compute(site, &unit.Source, Request{Start: t, End: t.Add(horizon), Step: time.Duration(step * float64(time.Second)),
		Constraints: unit.Constraints, Weather: wx})
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
