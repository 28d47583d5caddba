package visibility

import (
	"math"
	"sort"
	"time"

	"github.com/obsops/obsops/pkg/weather"
)

// Window edge reasons of an obs unit's constraints (besides the site's six). A start edge names
// the constraint that stopped limiting there, an end edge the one that starts limiting; the LST
// range has a reason for each side.
const (
	ReasonAirmass     = "airmass_limit"       // the airmass crosses max_airmass
	ReasonMoon        = "moon_too_close"      // the Moon crosses min_moon_separation_deg
	ReasonPWV         = "pwv_above_limit"     // the PWV crosses max_pwv_mm
	ReasonLSTStart    = "lst_range_start"     // the LST enters lst_range
	ReasonLSTEnd      = "lst_range_end"       // the LST leaves lst_range
	ReasonOutsideTime = "outside_time_window" // a time window begins or ends
)

// Constraint names, as the obs unit's fields: what Check reports as failing or unknown.
const (
	ConstraintMinElevation   = "min_elevation_deg"
	ConstraintMaxElevation   = "max_elevation_deg"
	ConstraintSunSeparation  = "min_sun_separation_deg"
	ConstraintAirmass        = "max_airmass"
	ConstraintMoonSeparation = "min_moon_separation_deg"
	ConstraintPWV            = "max_pwv_mm"
	ConstraintLSTRange       = "lst_range"
	ConstraintTimeWindows    = "time_windows"
)

// LSTRange is a range of local sidereal time in hours [0, 24): from StartHours to EndHours,
// wrapping midnight when EndHours < StartHours (22 → 2 is four hours).
type LSTRange struct {
	StartHours float64 `json:"start_hours" minimum:"0" exclusiveMaximum:"24" example:"22" doc:"LST hours [0, 24) where the range begins."`
	EndHours   float64 `json:"end_hours" minimum:"0" exclusiveMaximum:"24" example:"2" doc:"LST hours [0, 24) where it ends; less than start_hours: across LST midnight."`
}

// Contains tells whether the LST h (hours) is in the range (start included, end excluded).
func (r LSTRange) Contains(h float64) bool {
	return math.Mod(h-r.StartHours+48, 24) < math.Mod(r.EndHours-r.StartHours+48, 24)
}

// ObsConstraints are an obs unit's observing constraints, applied on top of the site's (a nil
// field or an empty list is no constraint). The rule of valid values is the catalog's
// (catalog.ObsUnitConstraints); the engine takes them as given.
type ObsConstraints struct {
	// MinElevationDeg replaces the site's lower elevation limit.
	MinElevationDeg *float64
	// MaxAirmass: sec z at most this (≥ 1); an elevation limit of asin(1/MaxAirmass).
	MaxAirmass *float64
	// MinMoonSeparationDeg: the topocentric angle to the Moon at least this.
	MinMoonSeparationDeg *float64
	// MinSunSeparationDeg replaces the site's Sun avoidance radius (0: no Sun avoidance).
	MinSunSeparationDeg *float64
	// MaxPWVmm: the PWV at most this, by pkg/weather's rule (Request.Weather). With no reading
	// the constraint is unknown: it does not cut a window, the window says so.
	MaxPWVmm *float64
	// LSTRange: the local sidereal time within the range.
	LSTRange *LSTRange
	// TimeWindows: inside one of these UTC intervals (start included, end included), sorted,
	// not overlapping.
	TimeWindows []Interval
}

// PWVSpan is a part of a window with one basis of the PWV: measured, forecast, or unknown (no
// reading: the limit could not be checked there).
type PWVSpan struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Basis string    `json:"basis" enum:"measurement,forecast,unknown" doc:"measurement: the radiometer (past and now); forecast: the newest run issued by now; unknown: no reading, the limit was not checked."`
}

// Verdict is whether a source is observable at one instant under the site's and an obs unit's
// constraints, and why not.
type Verdict struct {
	// Observable: every constraint is met (a PWV limit without data counts as met, and is listed
	// in Unknown).
	Observable bool
	// Failing names the constraints not met (Constraint* names), in a fixed order: elevation,
	// Sun, airmass, Moon, LST, time windows, PWV.
	Failing []string
	// Unknown names the constraints that could not be evaluated (max_pwv_mm without data).
	Unknown []string
	// AltDeg, AzDeg, SunSepDeg: the position as At gives it; MoonSepDeg when a Moon limit is set
	// (else NaN); Airmass when above the horizon (else NaN); LSTHours always.
	AltDeg, AzDeg, SunSepDeg, MoonSepDeg, Airmass, LSTHours float64
	// PWV is the PWV used when a PWV limit is set.
	PWV *weather.PWV
}

// Check evaluates the constraints at t with the full SOFA pipeline (as At): the cheap "now"
// question, exactly the windows' test. oc and wx may be nil (no obs-unit constraints, no
// weather: a PWV limit is then unknown).
func Check(site *Site, src *Source, oc *ObsConstraints, wx *weather.Series, t time.Time) Verdict {
	alt, az, sunSep := Full(site, src, t)
	c := newConstraints(site, nil, oc, wx, src, nil)
	p := Point{Alt: alt * deg, Az: az * deg, SunSep: sunSep * deg}
	u := Unix(t)
	v := Verdict{AltDeg: alt, AzDeg: math.Mod(az+360, 360), SunSepDeg: sunSep, MoonSepDeg: math.NaN(), Airmass: math.NaN(),
		LSTHours: LSTHours(site, t)}
	if alt > 0 {
		v.Airmass = 1 / math.Sin(alt*deg)
	}
	if c.useMoon {
		malt, maz, _ := Full(site, &Source{Kind: KindSolarSystem, Body: "moon"}, t)
		v.MoonSepDeg = c.moonSep(p, malt*deg, maz*deg) / deg
	}
	m := c.marginsWith(u, p, v.MoonSepDeg*deg)
	names := [nMargins]string{ConstraintMinElevation, ConstraintMaxElevation, ConstraintSunSeparation, ConstraintAirmass,
		ConstraintMoonSeparation, ConstraintLSTRange, ConstraintTimeWindows, ConstraintPWV}
	for k := range nMargins {
		if m[k] < 0 {
			v.Failing = append(v.Failing, names[k])
		}
	}
	if c.usePWV {
		pw := c.pwvAt(u)
		v.PWV = &pw
		if pw.Kind == weather.KindUnknown {
			v.Unknown = append(v.Unknown, ConstraintPWV)
		}
	}
	v.Observable = len(v.Failing) == 0
	return v
}

// margin indices
const (
	mLow = iota
	mHigh
	mSun
	mAirmass
	mMoon
	mLST
	mTime
	mPWV
	nMargins
)

// lstMargin is how far (hours) the LST h is inside the range (≥ 0) or outside it (< 0).
func lstMargin(r LSTRange, h float64) float64 {
	w := math.Mod(r.EndHours-r.StartHours+48, 24)
	x := math.Mod(h-r.StartHours+48, 24)
	if x <= w {
		return math.Min(x, w-x)
	}
	return -math.Min(x-w, 24-x)
}

// timeMargin is how far (s) u is inside one of the sorted windows (≥ 0) or from the nearest (< 0).
func timeMargin(ws [][2]float64, u float64) float64 {
	i := sort.Search(len(ws), func(i int) bool { return ws[i][0] > u }) - 1 // last window starting at or before u
	if i >= 0 && u <= ws[i][1] {
		return math.Min(u-ws[i][0], ws[i][1]-u)
	}
	d := math.Inf(1)
	if i >= 0 {
		d = u - ws[i][1]
	}
	if i+1 < len(ws) {
		d = math.Min(d, ws[i+1][0]-u)
	}
	return -d
}

// lstCrossings lists the times in (u0, u1) where the LST is h hours (one a sidereal day).
func lstCrossings(site *Site, h, u0, u1 float64) []float64 {
	const rate = 24 * 1.00273781191135448 / 86400 // LST hours per UT second
	var out []float64
	u := u0 + math.Mod(h-LSTHours(site, FromUnix(u0))+48, 24)/rate
	for ; u < u1+3600; u += 24 / rate {
		x := u
		for range 2 { // Newton on the exact LST: the rate's approximation is far below a second
			x -= math.Remainder(LSTHours(site, FromUnix(x))-h, 24) / rate
		}
		if x > u0 && x < u1 {
			out = append(out, x)
		}
	}
	return out
}

// pwvSpans is the PWV's basis over [a, b] (Unix s), part by part: constant between the series'
// breaks, so each part's basis is the one at its middle.
func (c *constraints) pwvSpans(a, b float64) []PWVSpan {
	cuts := []float64{a}
	if c.wx != nil {
		for _, t := range c.wx.Breaks(FromUnix(a), FromUnix(b)) {
			cuts = append(cuts, Unix(t))
		}
	}
	cuts = append(cuts, b)
	var out []PWVSpan
	for i := 0; i+1 < len(cuts); i++ {
		kind := c.pwvAt((cuts[i] + cuts[i+1]) / 2).Kind
		if b == a {
			kind = c.pwvAt(a).Kind
		}
		if n := len(out); n > 0 && out[n-1].Basis == kind {
			out[n-1].End = FromUnix(cuts[i+1])
			continue
		}
		out = append(out, PWVSpan{Start: FromUnix(cuts[i]), End: FromUnix(cuts[i+1]), Basis: kind})
	}
	return out
}
