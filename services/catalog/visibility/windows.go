package visibility

import (
	"math"
	"sort"
	"time"

	"github.com/obsops/obsops/pkg/weather"
)

// Window edge reasons.
const (
	ReasonRises       = "rises_above_limit"
	ReasonSets        = "sets_below_limit"
	ReasonLeavesSun   = "leaves_sun_avoidance"
	ReasonEntersSun   = "enters_sun_avoidance"
	ReasonRangeStart  = "range_start"
	ReasonRangeEnd    = "range_end"
	maxScanStep       = 600.0   // windows are searched on a grid no coarser than this (seconds)…
	maxScanPoints     = 400_000 // …unless the range is so long that the grid would exceed this
	rootTolerance     = 0.5     // edges are bracketed to this width (s): error ≤ 0.25 s
	riseSearchSeconds = 26 * 3600
)

// Request is one visibility computation. MinElevationDeg, when set, replaces the site's lower
// elevation limit and the obs unit's. Constraints (optional) are an obs unit's constraints, applied
// on top of the site's; Weather is the PWV series a PWV limit reads (nil: the PWV is unknown).
type Request struct {
	Start, End      time.Time
	Step            time.Duration
	MinElevationDeg *float64
	Constraints     *ObsConstraints
	Weather         *weather.Series
}

// Sample is the position at one sample time.
type Sample struct {
	Time       time.Time `json:"time"`
	AltDeg     float64   `json:"alt_deg" doc:"Altitude, geometric unless refraction is configured."`
	AzDeg      float64   `json:"az_deg" doc:"Azimuth from north through east."`
	Airmass    *float64  `json:"airmass" doc:"sec z; null when the source is below the horizon."`
	SunSepDeg  float64   `json:"sun_sep_deg" doc:"Angle between the source and the Sun."`
	Observable bool      `json:"observable"`
}

// Window is an interval in which the source is observable: every constraint is met, except a PWV
// limit without data, which is listed in Unknown (the window is given, flagged, not withheld).
// Its edges give the limiting constraint as reason.
type Window struct {
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	StartReason string    `json:"start_reason" enum:"rises_above_limit,sets_below_limit,leaves_sun_avoidance,range_start,airmass_limit,moon_too_close,pwv_above_limit,lst_range_start,outside_time_window" doc:"Why the window starts: the constraint that limited until then (range_start: the asked range's start)."`
	EndReason   string    `json:"end_reason" enum:"rises_above_limit,sets_below_limit,enters_sun_avoidance,range_end,airmass_limit,moon_too_close,pwv_above_limit,lst_range_end,outside_time_window" doc:"Why the window ends: the constraint that limits from then (range_end: the asked range's end)."`
	// PWV (with a PWV limit) is the basis of the PWV over the window, part by part.
	PWV []PWVSpan `json:"pwv,omitempty" doc:"With an obs unit's max_pwv_mm: the PWV's basis over the window, part by part."`
	// Unknown lists the constraints that could not be checked over some part of the window.
	Unknown []string `json:"unknown_constraints,omitempty" enum:"max_pwv_mm" doc:"Constraints not checked over some part of the window for want of data (max_pwv_mm: no PWV reading; see pwv)."`
}

// Interval is a time span (used for the Sun-avoidance periods of the plot).
type Interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Result is the visibility of a source over a range.
type Result struct {
	Samples         []Sample
	Windows         []Window
	SunAvoidance    []Interval
	Rise, Set       *time.Time
	Transit         *time.Time
	MaxAltDeg       float64
	HoursObservable float64
	MinElevationDeg float64
	MaxElevationDeg float64
}

// SampleCount is the number of samples a range gives: start + k·step up to end inclusive.
func SampleCount(start, end time.Time, step time.Duration) int64 {
	if step <= 0 || end.Before(start) {
		return 0
	}
	return int64(end.Sub(start)/step) + 1
}

// constraints are the margins that must all be ≥ 0 for the source to be observable: the site's
// elevation limits and Sun avoidance, and an obs unit's (ObsConstraints).
type constraints struct {
	lo, hi, sun, airmassAlt, moon float64 // radians
	useHi, useSun, useAirmass     bool
	useMoon, useLST, useTime      bool
	usePWV                        bool
	lst                           LSTRange
	windows                       [][2]float64 // Unix s, sorted
	maxPWV                        float64
	wx                            *weather.Series
	src                           *Source
	site                          *Site
	moonTr                        *Track // the Moon's track (windows); nil in Check, which passes the separation
}

// margins evaluates every margin at Unix time u with the source at p.
func (c *constraints) margins(u float64, p Point) [nMargins]float64 {
	moonSep := 0.0
	if c.useMoon {
		m := c.moonTr.At(u)
		moonSep = c.moonSep(p, m.Alt, m.Az)
	}
	return c.marginsWith(u, p, moonSep)
}

// marginsWith is margins with the Moon's separation given (radians; ignored without a Moon limit).
func (c *constraints) marginsWith(u float64, p Point, moonSep float64) [nMargins]float64 {
	m := [nMargins]float64{p.Alt - c.lo, 1, 1, 1, 1, 1, 1, 1}
	if c.useHi {
		m[mHigh] = c.hi - p.Alt
	}
	if c.useSun {
		m[mSun] = p.SunSep - c.sun
	}
	if c.useAirmass {
		m[mAirmass] = p.Alt - c.airmassAlt
	}
	if c.useMoon {
		m[mMoon] = moonSep - c.moon
	}
	if c.useLST {
		m[mLST] = lstMargin(c.lst, lst(u, c.site.LongitudeDeg*deg)/(2*math.Pi)*24)
	}
	if c.useTime {
		m[mTime] = timeMargin(c.windows, u)
	}
	if c.usePWV {
		if pw := c.pwvAt(u); pw.PWVmm != nil {
			m[mPWV] = c.maxPWV - *pw.PWVmm
		}
	}
	return m
}

func (c *constraints) ok(m [nMargins]float64) bool {
	for _, v := range m {
		if v < 0 {
			return false
		}
	}
	return true
}

// moonSep is the source's angle to the Moon (radians) seen from the site; for a
// constant-elevation scan, to the closest point of the scan.
func (c *constraints) moonSep(p Point, moonAlt, moonAz float64) float64 {
	if c.src.Kind == KindConstantElevation {
		return arcSep(c.src, moonAlt, moonAz)
	}
	return SeparationAltAzDeg(p.Alt/deg, p.Az/deg, moonAlt/deg, moonAz/deg) * deg
}

// pwvAt is the PWV at Unix time u by pkg/weather's rule (unknown without a series).
func (c *constraints) pwvAt(u float64) weather.PWV {
	if c.wx == nil {
		return weather.PWV{Kind: weather.KindUnknown}
	}
	return c.wx.At(FromUnix(u))
}

// newConstraints combines the site's constraints with an obs unit's (oc may be nil); minEl, when
// set, replaces both the site's and the obs unit's lower elevation limit. tr is the source's
// track, whose nodes the Moon's track shares (nil: no Moon track, as in Check).
func newConstraints(site *Site, minEl *float64, oc *ObsConstraints, wx *weather.Series, src *Source, tr *Track) constraints {
	if oc == nil {
		oc = &ObsConstraints{}
	}
	lo := site.MinElevationDeg
	if oc.MinElevationDeg != nil {
		lo = *oc.MinElevationDeg
	}
	if minEl != nil {
		lo = *minEl
	}
	sun := site.SunAvoidanceDeg
	if oc.MinSunSeparationDeg != nil {
		sun = *oc.MinSunSeparationDeg
	}
	c := constraints{lo: lo * deg, hi: site.MaxElevationDeg * deg, sun: sun * deg,
		useHi: site.MaxElevationDeg < 90, useSun: sun > 0, src: src, wx: wx, site: site}
	if oc.MaxAirmass != nil {
		c.useAirmass, c.airmassAlt = true, math.Asin(1/math.Max(1, *oc.MaxAirmass))
	}
	if oc.MinMoonSeparationDeg != nil && *oc.MinMoonSeparationDeg > 0 {
		c.useMoon, c.moon = true, *oc.MinMoonSeparationDeg*deg
		if tr != nil {
			tr.tab.addBody(-1)
			c.moonTr = newTrackOn(site, &Source{Kind: KindSolarSystem, Body: "moon"}, tr.tab, tr.obs)
		}
	}
	if oc.LSTRange != nil {
		c.useLST, c.lst = true, *oc.LSTRange
	}
	if len(oc.TimeWindows) > 0 {
		c.useTime = true
		for _, w := range oc.TimeWindows {
			c.windows = append(c.windows, [2]float64{Unix(w.Start), Unix(w.End)})
		}
		sort.Slice(c.windows, func(i, j int) bool { return c.windows[i][0] < c.windows[j][0] })
	}
	if oc.MaxPWVmm != nil {
		c.usePWV, c.maxPWV = true, *oc.MaxPWVmm
	}
	return c
}

// breaks lists the times in (u0, u1) the scan must evaluate besides its grid, so that no change
// of a time-only margin falls between two grid points unseen: the time windows' edges, the LST
// range's edges and middle, the weather series' breaks. Sorted.
func (c *constraints) breaks(site *Site, u0, u1 float64) []float64 {
	var out []float64
	if c.useTime {
		for _, w := range c.windows {
			for _, u := range w {
				if u > u0 && u < u1 {
					out = append(out, u)
				}
			}
		}
	}
	if c.useLST {
		mid := math.Mod(c.lst.StartHours+math.Mod(c.lst.EndHours-c.lst.StartHours+48, 24)/2, 24)
		for _, h := range []float64{c.lst.StartHours, c.lst.EndHours, mid} {
			out = append(out, lstCrossings(site, h, u0, u1)...)
		}
	}
	if c.usePWV && c.wx != nil {
		for _, t := range c.wx.Breaks(FromUnix(u0), FromUnix(u1)) {
			out = append(out, Unix(t))
		}
	}
	sort.Float64s(out)
	return out
}

type event struct {
	u      float64
	margin int
	up     bool // the margin became ≥ 0
}

// root finds where margin k of the track changes sign between ua (value ma) and ub (mb),
// by the Illinois variant of regula falsi, to a bracket of rootTolerance seconds. The time
// windows' edges are grid points (constraints.breaks): the edge is the bracket's end inside the
// window, exactly.
func root(tr *Track, c *constraints, k int, ua, ma, ub, mb float64) float64 {
	if k == mTime {
		if ma >= 0 {
			return ua
		}
		return ub
	}
	side := 0
	for ub-ua > rootTolerance {
		um := (ua*mb - ub*ma) / (mb - ma)
		// keep the step inside the bracket and away from its ends
		if !(um > ua+rootTolerance/4 && um < ub-rootTolerance/4) {
			um = (ua + ub) / 2
		}
		mm := c.margins(um, tr.At(um))[k]
		if (mm >= 0) == (mb >= 0) {
			ub, mb = um, mm
			if side == -1 {
				ma /= 2
			}
			side = -1
		} else {
			ua, ma = um, mm
			if side == 1 {
				mb /= 2
			}
			side = 1
		}
	}
	return (ua + ub) / 2
}

// scan evaluates the track on a grid over [u0, u1], plus the times extra (sorted), and returns
// the sign changes of every margin, located by root finding, plus the margins at u0. visit
// (optional) sees every point of the regular grid (not the extra times).
func scan(tr *Track, c *constraints, u0, u1, step float64, extra []float64, visit func(u float64, p Point)) (first [nMargins]float64, events []event) {
	n := int(math.Ceil((u1 - u0) / step))
	var pu float64
	var pm [nMargins]float64
	started := false
	at := func(u float64, p Point) {
		m := c.margins(u, p)
		if !started {
			first, started = m, true
		} else {
			for k := range nMargins {
				if (m[k] >= 0) != (pm[k] >= 0) {
					events = append(events, event{u: root(tr, c, k, pu, pm[k], u, m[k]), margin: k, up: m[k] >= 0})
				}
			}
		}
		pu, pm = u, m
	}
	x := 0
	for j := 0; j <= n; j++ {
		u := u0 + float64(j)*step
		if j == n {
			u = u1
		}
		for ; x < len(extra) && extra[x] < u; x++ {
			if extra[x] > pu && started {
				at(extra[x], tr.At(extra[x]))
			}
		}
		p := tr.At(u)
		if visit != nil {
			visit(u, p)
		}
		at(u, p)
		if u >= u1 {
			break
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].u < events[j].u })
	return first, events
}

func reason(e event) string {
	switch e.margin {
	case mLow, mHigh:
		if (e.margin == mLow) == e.up {
			return ReasonRises
		}
		return ReasonSets
	case mSun:
		if e.up {
			return ReasonLeavesSun
		}
		return ReasonEntersSun
	case mAirmass:
		return ReasonAirmass
	case mMoon:
		return ReasonMoon
	case mLST:
		if e.up {
			return ReasonLSTStart
		}
		return ReasonLSTEnd
	case mTime:
		return ReasonOutsideTime
	default:
		return ReasonPWV
	}
}

// windowsFrom walks the events and returns the observable windows and Sun-avoidance periods (Unix s).
func windowsFrom(c *constraints, first [nMargins]float64, events []event, u0, u1 float64) (wins []rawWindow, sun [][2]float64) {
	state := first
	open := c.ok(state)
	var cur rawWindow
	if open {
		cur = rawWindow{start: u0, startReason: ReasonRangeStart}
	}
	sunStart, inSun := u0, state[mSun] < 0
	for _, e := range events {
		if e.up {
			state[e.margin] = 0
		} else {
			state[e.margin] = -1
		}
		if e.margin == mSun {
			if !e.up && !inSun {
				sunStart, inSun = e.u, true
			} else if e.up && inSun {
				sun = append(sun, [2]float64{sunStart, e.u})
				inSun = false
			}
		}
		now := c.ok(state)
		switch {
		case now && !open:
			cur = rawWindow{start: e.u, startReason: reason(e)}
		case !now && open:
			cur.end, cur.endReason = e.u, reason(e)
			if cur.end > cur.start {
				wins = append(wins, cur)
			}
		}
		open = now
	}
	if open {
		cur.end, cur.endReason = u1, ReasonRangeEnd
		if cur.end > cur.start || len(wins) == 0 {
			wins = append(wins, cur)
		}
	}
	if inSun {
		sun = append(sun, [2]float64{sunStart, u1})
	}
	return wins, sun
}

type rawWindow struct {
	start, end             float64
	startReason, endReason string
}

// Compute answers one visibility request: samples, windows, rise/set/transit, maximum altitude
// and hours observable. The request must be valid (start ≤ end, step > 0).
func Compute(site *Site, src *Source, req Request) *Result {
	u0, u1 := Unix(req.Start), Unix(req.End)
	step := req.Step.Seconds()
	tr := NewTrack(site, src, u0, math.Max(u1, u0+riseSearchSeconds))
	c := newConstraints(site, req.MinElevationDeg, req.Constraints, req.Weather, src, tr)
	res := &Result{MinElevationDeg: c.lo / deg, MaxElevationDeg: site.MaxElevationDeg}

	n := SampleCount(req.Start, req.End, req.Step)
	res.Samples = make([]Sample, 0, n)
	res.MaxAltDeg = math.Inf(-1)
	addSample := func(tm time.Time, p Point) {
		s := Sample{Time: tm, AltDeg: round(p.Alt/deg, 6), AzDeg: round(p.Az/deg, 6), SunSepDeg: round(p.SunSep/deg, 6),
			Observable: c.ok(c.margins(Unix(tm), p))}
		if p.Alt > 0 {
			am := round(1/math.Sin(p.Alt), 6)
			s.Airmass = &am
		}
		res.Samples = append(res.Samples, s)
		res.MaxAltDeg = math.Max(res.MaxAltDeg, p.Alt/deg)
	}
	scanStep := math.Min(step, maxScanStep)
	scanStep = math.Max(scanStep, (u1-u0)/maxScanPoints)
	var visit func(u float64, p Point)
	if scanStep == step {
		// the scan grid is the sample grid: sample times are exact (start + k·step)
		visit = func(u float64, p Point) {
			if k := int64(len(res.Samples)); k < n {
				addSample(req.Start.Add(time.Duration(k)*req.Step), p)
			}
		}
	}
	first, events := scan(tr, &c, u0, u1, scanStep, c.breaks(site, u0, u1), visit)
	if visit == nil {
		for k := range n {
			tm := req.Start.Add(time.Duration(k) * req.Step)
			addSample(tm, tr.At(Unix(tm)))
		}
	}
	if pe := tr.At(u1); pe.Alt/deg > res.MaxAltDeg {
		res.MaxAltDeg = pe.Alt / deg
	}
	wins, sun := windowsFrom(&c, first, events, u0, u1)
	for _, w := range wins {
		win := Window{Start: FromUnix(w.start), End: FromUnix(w.end), StartReason: w.startReason, EndReason: w.endReason}
		if c.usePWV {
			win.PWV = c.pwvSpans(w.start, w.end)
			for _, sp := range win.PWV {
				if sp.Basis == weather.KindUnknown {
					win.Unknown = []string{ConstraintPWV}
				}
			}
		}
		res.Windows = append(res.Windows, win)
		res.HoursObservable += (w.end - w.start) / 3600
	}
	for _, s := range sun {
		res.SunAvoidance = append(res.SunAvoidance, Interval{Start: FromUnix(s[0]), End: FromUnix(s[1])})
	}
	if src.Kind != KindConstantElevation {
		res.Rise, res.Set, res.Transit = riseSetTransit(tr, &c, u0, math.Max(u1, u0+riseSearchSeconds), scanStep)
		if res.Transit != nil {
			if ut := Unix(*res.Transit); ut <= u1 {
				res.MaxAltDeg = math.Max(res.MaxAltDeg, tr.At(ut).Alt/deg)
			}
		}
	}
	res.MaxAltDeg = round(res.MaxAltDeg, 6)
	res.HoursObservable = round(res.HoursObservable, 4)
	return res
}

// riseSetTransit finds the first crossings of the lower elevation limit (upward: rise, downward:
// set) and the first upper culmination (hour angle through zero) after u0, searching to u1.
func riseSetTransit(tr *Track, c *constraints, u0, u1, step float64) (rise, set, transit *time.Time) {
	step = math.Min(step, maxScanStep)
	ha := func(u float64) float64 { return tr.At(u).HA }
	pu := u0
	pp := tr.At(u0)
	for u := u0 + step; pu < u1 && (rise == nil || set == nil || transit == nil); u += step {
		u = math.Min(u, u1)
		p := tr.At(u)
		a0, a1 := pp.Alt-c.lo, p.Alt-c.lo
		// the same root finding as the window edges, so a window that starts by rising starts at rise
		if rise == nil && a0 < 0 && a1 >= 0 {
			t := FromUnix(root(tr, c, 0, pu, a0, u, a1))
			rise = &t
		}
		if set == nil && a0 >= 0 && a1 < 0 {
			t := FromUnix(root(tr, c, 0, pu, a0, u, a1))
			set = &t
		}
		// upper culmination: the hour angle increases through 0 (not the wrap at ±π)
		if transit == nil && pp.HA < 0 && p.HA >= 0 && p.HA-pp.HA < math.Pi {
			t := FromUnix(bisect(ha, pu, pp.HA, u, p.HA))
			transit = &t
		}
		pu, pp = u, p
	}
	return rise, set, transit
}

// bisect finds the sign change of f in [a, b] to rootTolerance.
func bisect(f func(float64) float64, a, fa, b, fb float64) float64 {
	for b-a > rootTolerance {
		m := (a + b) / 2
		fm := f(m)
		if (fm >= 0) == (fb >= 0) {
			b, fb = m, fm
		} else {
			a, fa = m, fm
		}
	}
	_ = fa
	return (a + b) / 2
}

var pow10 = [...]float64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

func round(v float64, digits int) float64 {
	p := pow10[digits]
	return math.Round(v*p) / p
}
