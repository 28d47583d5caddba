package visibility

import (
	"encoding/csv"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hebl/gofa"

	"github.com/obsops/obsops/pkg/weather"
)

func ptr[T any](v T) *T { return &v }

// TestGoldenConstraints compares the constraints' quantities with astropy
// (testdata/golden_constraints.csv, golden.py constraints): airmass (sec z) from Check, the
// angle to the Moon from Check (full SOFA) and from the windows' fast Moon track within 15" (the
// Moon's own bound in TestGolden), and the LST within 1 ms.
func TestGoldenConstraints(t *testing.T) {
	f, err := os.Open("testdata/golden_constraints.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 150 {
		t.Fatalf("only %d golden rows", len(recs))
	}
	site := DefaultSite()
	oc := &ObsConstraints{MinMoonSeparationDeg: ptr(1.0), MaxAirmass: ptr(2.0)}
	var worstAM, worstMoon, worstFast, worstLST float64
	airmassRows := 0
	for _, r := range recs[1:] {
		num := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		tm, err := time.Parse(time.RFC3339Nano, r[3])
		if err != nil {
			t.Fatal(err)
		}
		src := Source{Kind: KindFixed, RADeg: num(r[1]), DecDeg: num(r[2])}
		v := Check(&site, &src, oc, nil, tm)
		if r[5] != "" {
			am := num(r[5])
			// an altitude error δ moves sec z by about sec²z·δ: allow 1" of altitude
			if d := math.Abs(v.Airmass - am); d > am*am*1/3600*deg+1e-9 {
				t.Errorf("%s %s: airmass %.9f, astropy %.9f", r[0], r[3], v.Airmass, am)
			} else {
				worstAM = math.Max(worstAM, d)
			}
			airmassRows++
		} else if !math.IsNaN(v.Airmass) {
			t.Errorf("%s %s: airmass %v below the horizon", r[0], r[3], v.Airmass)
		}
		moon := num(r[6])
		if d := math.Abs(v.MoonSepDeg-moon) * 3600; d > 15 {
			t.Errorf("%s %s: Moon separation %.6f, astropy %.6f (%.2f\")", r[0], r[3], v.MoonSepDeg, moon, d)
		} else {
			worstMoon = math.Max(worstMoon, d)
		}
		u := Unix(tm)
		tr := NewTrack(&site, &src, u, u)
		c := newConstraints(&site, nil, oc, nil, &src, tr)
		mp := c.moonTr.At(u)
		fast := c.moonSep(tr.At(u), mp.Alt, mp.Az) / deg
		if d := math.Abs(fast-moon) * 3600; d > 15 {
			t.Errorf("%s %s: fast Moon separation %.6f, astropy %.6f (%.2f\")", r[0], r[3], fast, moon, d)
		} else {
			worstFast = math.Max(worstFast, d)
		}
		lst := num(r[7])
		if d := math.Abs(math.Remainder(v.LSTHours-lst, 24)) * 3600; d > 1e-3 {
			t.Errorf("%s %s: LST %.9f h, astropy %.9f h (%.4f s)", r[0], r[3], v.LSTHours, lst, d)
		} else {
			worstLST = math.Max(worstLST, d)
		}
	}
	if airmassRows < 50 {
		t.Fatalf("only %d rows above the horizon", airmassRows)
	}
	t.Logf("%d rows: worst airmass %.2g, Moon %.2f\" (fast %.2f\"), LST %.2g s", len(recs)-1, worstAM, worstMoon, worstFast, worstLST)
}

// reasons counts the windows' start and end reasons.
func reasons(res *Result) map[string]int {
	m := map[string]int{}
	for _, w := range res.Windows {
		m[w.StartReason]++
		m[w.EndReason]++
	}
	return m
}

// betaHyi is circumpolar at the site (altitude 10°–36°) and always 53° or more from the Sun: with
// a 5° elevation limit it is always observable, so the time-only constraints alone shape its windows.
var betaHyi = Source{Kind: KindFixed, RADeg: 6.43779233, DecDeg: -77.25424612}

func TestWindowReasonAirmass(t *testing.T) {
	site := DefaultSite()
	src := Source{Kind: KindFixed, RADeg: 95.988, DecDeg: -52.696} // Canopus: culminates at 60°
	start := mustTime(t, "2026-03-01T00:00:00Z")
	oc := &ObsConstraints{MaxAirmass: ptr(1.5), MinSunSeparationDeg: ptr(0.0)}
	res := Compute(&site, &src, Request{Start: start, End: start.Add(72 * time.Hour), Step: 10 * time.Minute, Constraints: oc})
	if r := reasons(res); r[ReasonAirmass] < 5 || r[ReasonRises]+r[ReasonSets] != 0 {
		t.Fatalf("want the airmass to limit every edge, got %v", r)
	}
	for _, w := range res.Windows {
		for _, e := range []time.Time{w.Start, w.End} {
			if e.Equal(start) || e.Equal(start.Add(72*time.Hour)) {
				continue
			}
			if am := Check(&site, &src, oc, nil, e).Airmass; math.Abs(am-1.5) > 1e-4 {
				t.Errorf("edge %s: airmass %.6f, want 1.5", e, am)
			}
		}
	}
	for _, s := range res.Samples {
		if s.Observable != (s.Airmass != nil && *s.Airmass <= 1.5) && math.Abs(deref(s.Airmass)-1.5) > 1e-4 {
			t.Fatalf("sample %s airmass %v observable %v", s.Time, deref(s.Airmass), s.Observable)
		}
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.Inf(1)
	}
	return *p
}

// TestWindowReasonMoon: a 45° scan all around the sky is too close to the Moon whenever the Moon
// is within 10° of that elevation: the windows say moon_too_close there, and the Moon is 10° from
// the scan at those edges. A fixed source placed on the Moon fails the Moon limit.
func TestWindowReasonMoon(t *testing.T) {
	site := DefaultSite()
	at := mustTime(t, "2026-03-03T12:00:00Z")
	scan := Source{Kind: KindConstantElevation, ElevationDeg: 45, AzMinDeg: 0, AzMaxDeg: 359.9}
	oc := &ObsConstraints{MinMoonSeparationDeg: ptr(10.0), MinSunSeparationDeg: ptr(0.0)}
	res := Compute(&site, &scan, Request{Start: at, End: at.Add(72 * time.Hour), Step: 10 * time.Minute, Constraints: oc})
	n := 0
	for _, w := range res.Windows {
		for i, e := range []time.Time{w.Start, w.End} {
			if e.Equal(at) || e.Equal(at.Add(72*time.Hour)) {
				continue
			}
			if []string{w.StartReason, w.EndReason}[i] != ReasonMoon {
				t.Errorf("edge %s: %s", e, []string{w.StartReason, w.EndReason}[i])
				continue
			}
			n++
			if v := Check(&site, &scan, oc, nil, e); math.Abs(v.MoonSepDeg-10) > 0.01 {
				t.Errorf("edge %s: Moon %.4f° away, want 10°", e, v.MoonSepDeg)
			}
		}
	}
	if n < 8 {
		t.Fatalf("want moon_too_close edges, got %v", reasons(res))
	}
	ra, dec, err := BodyICRS("moon", at)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Kind: KindFixed, RADeg: ra, DecDeg: dec}
	if v := Check(&site, &src, oc, nil, at); v.Observable && slices.Contains(v.Failing, ConstraintMoonSeparation) || v.MoonSepDeg > 1.5 {
		t.Fatalf("a source on the Moon: %+v", v)
	} else if !slices.Contains(v.Failing, ConstraintMoonSeparation) {
		t.Fatalf("a source on the Moon passes the Moon limit: %+v", v)
	}
}

// TestWindowReasonLST: with an LST range across midnight (22 h → 2 h) the always-observable
// β Hyi has one window a sidereal day, from LST 22 h to 2 h.
func TestWindowReasonLST(t *testing.T) {
	site := DefaultSite()
	start := mustTime(t, "2026-05-10T00:00:00Z")
	oc := &ObsConstraints{MinElevationDeg: ptr(5.0), LSTRange: &LSTRange{StartHours: 22, EndHours: 2}}
	res := Compute(&site, &betaHyi, Request{Start: start, End: start.Add(72 * time.Hour), Step: time.Hour, Constraints: oc})
	full := 0
	for _, w := range res.Windows {
		if w.StartReason == ReasonLSTStart {
			if h := LSTHours(&site, w.Start); math.Abs(math.Remainder(h-22, 24)) > 1e-4 {
				t.Errorf("start %s at LST %.6f", w.Start, h)
			}
		}
		if w.EndReason == ReasonLSTEnd {
			if h := LSTHours(&site, w.End); math.Abs(math.Remainder(h-2, 24)) > 1e-4 {
				t.Errorf("end %s at LST %.6f", w.End, h)
			}
		}
		if w.StartReason == ReasonLSTStart && w.EndReason == ReasonLSTEnd {
			full++
			if d := w.End.Sub(w.Start).Hours(); math.Abs(d-4/1.0027379) > 1e-3 {
				t.Errorf("window of %.4f h, want 4 sidereal hours", d)
			}
		}
	}
	if full < 2 || len(res.Windows) > 4 {
		t.Fatalf("want a 4-h LST window a day, got %+v", res.Windows)
	}
	// a range shorter than the grid step is still found (the scan evaluates its middle)
	oc.LSTRange = &LSTRange{StartHours: 3, EndHours: 3.01}
	res = Compute(&site, &betaHyi, Request{Start: start, End: start.Add(24 * time.Hour), Step: time.Hour, Constraints: oc})
	if len(res.Windows) != 1 || math.Abs(res.Windows[0].End.Sub(res.Windows[0].Start).Seconds()-36/1.0027379) > 1 {
		t.Fatalf("36-s LST range: %+v", res.Windows)
	}
}

// TestWindowReasonTimeWindows: the windows are the time windows exactly, however short.
func TestWindowReasonTimeWindows(t *testing.T) {
	site := DefaultSite()
	start := mustTime(t, "2026-05-10T00:00:00Z")
	tw := []Interval{
		{Start: start.Add(-time.Hour), End: start.Add(90 * time.Minute)},
		{Start: start.Add(5 * time.Hour), End: start.Add(5*time.Hour + 10*time.Second)}, // between grid points
		{Start: start.Add(20 * time.Hour), End: start.Add(30 * time.Hour)},
	}
	oc := &ObsConstraints{MinElevationDeg: ptr(5.0), TimeWindows: tw}
	res := Compute(&site, &betaHyi, Request{Start: start, End: start.Add(24 * time.Hour), Step: 10 * time.Minute, Constraints: oc})
	want := []Window{
		{Start: start, End: tw[0].End, StartReason: ReasonRangeStart, EndReason: ReasonOutsideTime},
		{Start: tw[1].Start, End: tw[1].End, StartReason: ReasonOutsideTime, EndReason: ReasonOutsideTime},
		{Start: tw[2].Start, End: start.Add(24 * time.Hour), StartReason: ReasonOutsideTime, EndReason: ReasonRangeEnd},
	}
	if len(res.Windows) != len(want) {
		t.Fatalf("windows %+v, want %+v", res.Windows, want)
	}
	for i, w := range res.Windows {
		if !w.Start.Equal(want[i].Start) || !w.End.Equal(want[i].End) || w.StartReason != want[i].StartReason || w.EndReason != want[i].EndReason {
			t.Errorf("window %d: %+v, want %+v", i, w, want[i])
		}
	}
	if v := Check(&site, &betaHyi, oc, nil, start.Add(3*time.Hour)); v.Observable || !slices.Equal(v.Failing, []string{ConstraintTimeWindows}) {
		t.Errorf("outside the time windows: %+v", v)
	}
	if v := Check(&site, &betaHyi, oc, nil, start.Add(time.Hour)); !v.Observable {
		t.Errorf("inside a time window: %+v", v)
	}
}

// pwvSeries: measurements every 5 min up to now (T+12 h), 0.5 mm but 2 mm in [T+3 h, T+4 h);
// a forecast run issued at T+11 h, hourly from T+12 h to T+20 h, 0.8 mm but 1.5 mm at T+15 h; a
// newer run issued after now, which must be ignored.
func pwvSeries(start time.Time) (*weather.Series, time.Time) {
	now := start.Add(12 * time.Hour)
	var rs []weather.Reading
	for m := time.Duration(0); m <= 12*time.Hour; m += 5 * time.Minute {
		v := 0.5
		if m >= 3*time.Hour && m < 4*time.Hour {
			v = 2
		}
		rs = append(rs, weather.Reading{Kind: weather.KindMeasurement, Time: start.Add(m), PWVmm: v, Source: "radiometer"})
	}
	issued, later := start.Add(11*time.Hour), now.Add(time.Minute)
	for h := 12; h <= 20; h++ {
		v := 0.8
		if h == 15 {
			v = 1.5
		}
		tm := start.Add(time.Duration(h) * time.Hour)
		rs = append(rs, weather.Reading{Kind: weather.KindForecast, Time: tm, PWVmm: v, Source: "model", IssuedAt: &issued},
			weather.Reading{Kind: weather.KindForecast, Time: tm, PWVmm: 9, Source: "model", IssuedAt: &later})
	}
	return weather.NewSeries(rs, now), now
}

// TestWindowReasonPWV: measurement for the past and now, the forecast for the future, unknown
// beyond: the edges fall where the PWV crosses 1 mm, each window says its basis part by part, and
// the part without data is flagged unknown rather than cut or silently passed.
func TestWindowReasonPWV(t *testing.T) {
	site := DefaultSite()
	start := mustTime(t, "2026-05-10T00:00:00Z")
	wx, now := pwvSeries(start)
	oc := &ObsConstraints{MinElevationDeg: ptr(5.0), MaxPWVmm: ptr(1.0)}
	res := Compute(&site, &betaHyi, Request{Start: start, End: start.Add(24 * time.Hour), Step: 10 * time.Minute, Constraints: oc, Weather: wx})
	h := func(x float64) time.Time { return start.Add(time.Duration(x * float64(time.Hour))) }
	up, down := 14+0.2/0.7, 16-0.2/0.7 // forecast: 0.8 → 1.5 → 0.8 crosses 1 mm
	want := []struct {
		s, e   time.Time
		sr, er string
		basis  []string
	}{
		{start, h(3), ReasonRangeStart, ReasonPWV, []string{"measurement"}},
		{h(4), h(up), ReasonPWV, ReasonPWV, []string{"measurement", "forecast"}},
		{h(down), h(24), ReasonPWV, ReasonRangeEnd, []string{"forecast", "unknown"}},
	}
	if len(res.Windows) != len(want) {
		t.Fatalf("windows %+v", res.Windows)
	}
	for i, w := range res.Windows {
		x := want[i]
		if math.Abs(w.Start.Sub(x.s).Seconds()) > 1 || math.Abs(w.End.Sub(x.e).Seconds()) > 1 || w.StartReason != x.sr || w.EndReason != x.er {
			t.Errorf("window %d: %s → %s (%s, %s), want %s → %s (%s, %s)", i, w.Start, w.End, w.StartReason, w.EndReason, x.s, x.e, x.sr, x.er)
		}
		var basis []string
		for _, sp := range w.PWV {
			basis = append(basis, sp.Basis)
		}
		if !slices.Equal(basis, x.basis) {
			t.Errorf("window %d: basis %v (%+v), want %v", i, basis, w.PWV, x.basis)
		}
		if unknown := slices.Contains(basis, "unknown"); unknown != slices.Equal(w.Unknown, []string{ConstraintPWV}) {
			t.Errorf("window %d: unknown_constraints %v with basis %v", i, w.Unknown, basis)
		}
	}
	if sp := res.Windows[1].PWV; len(sp) == 2 && !sp[0].End.Equal(now) {
		t.Errorf("measurement → forecast at %s, want now %s", sp[0].End, now)
	}
	// the instant check says which basis it used
	for _, c := range []struct {
		at        time.Time
		kind      string
		ok, known bool
	}{{h(1), weather.KindMeasurement, true, true}, {h(3.5), weather.KindMeasurement, false, true},
		{h(15), weather.KindForecast, false, true}, {h(22), weather.KindUnknown, true, false}} {
		v := Check(&site, &betaHyi, oc, wx, c.at)
		if v.PWV == nil || v.PWV.Kind != c.kind || v.Observable != c.ok || slices.Contains(v.Unknown, ConstraintPWV) == c.known {
			t.Errorf("at %s: %+v (PWV %+v), want %s observable=%v", c.at, v, v.PWV, c.kind, c.ok)
		}
	}
}

// TestWindowPWVWithoutData: no series at all: the window is given, its PWV unknown and flagged.
func TestWindowPWVWithoutData(t *testing.T) {
	site := DefaultSite()
	start := mustTime(t, "2026-05-10T00:00:00Z")
	oc := &ObsConstraints{MinElevationDeg: ptr(5.0), MaxPWVmm: ptr(1.0)}
	for _, wx := range []*weather.Series{nil, weather.NewSeries(nil, start)} {
		res := Compute(&site, &betaHyi, Request{Start: start, End: start.Add(6 * time.Hour), Step: time.Hour, Constraints: oc, Weather: wx})
		if len(res.Windows) != 1 || len(res.Windows[0].PWV) != 1 || res.Windows[0].PWV[0].Basis != weather.KindUnknown ||
			!slices.Equal(res.Windows[0].Unknown, []string{ConstraintPWV}) {
			t.Fatalf("windows %+v", res.Windows)
		}
	}
}

// TestConstraintsAgainstFineSampling: every constraint at once, windows against 1-s sampling of
// the margins (as TestWindowEdgesAgainstFineSampling for the site's constraints), for a star and
// an all-round scan; between them the edges have most of the new reasons.
func TestConstraintsAgainstFineSampling(t *testing.T) {
	site := DefaultSite()
	start := mustTime(t, "2026-03-01T00:00:00Z")
	wx, _ := pwvSeries(start)
	oc := &ObsConstraints{MaxAirmass: ptr(1.6), MinMoonSeparationDeg: ptr(10.0), MinSunSeparationDeg: ptr(30.0), MaxPWVmm: ptr(1.0),
		LSTRange: &LSTRange{StartHours: 8, EndHours: 20}, TimeWindows: []Interval{{Start: start.Add(2 * time.Hour), End: start.Add(60 * time.Hour)}}}
	u0, u1 := Unix(start), Unix(start)+72*3600
	all := map[string]int{}
	for _, src := range []Source{{Kind: KindFixed, RADeg: 95.988, DecDeg: -52.696}, {Kind: KindConstantElevation, ElevationDeg: 45, AzMinDeg: 0, AzMaxDeg: 359.9}} {
		res := Compute(&site, &src, Request{Start: start, End: FromUnix(u1), Step: 10 * time.Minute, Constraints: oc, Weather: wx})
		tr := NewTrack(&site, &src, u0, u1)
		c := newConstraints(&site, nil, oc, wx, &src, tr)
		near := func(u float64) bool {
			for _, w := range res.Windows {
				if math.Abs(u-Unix(w.Start)) <= 1 || math.Abs(u-Unix(w.End)) <= 1 {
					return true
				}
			}
			return false
		}
		in := func(u float64) bool {
			for _, w := range res.Windows {
				if u >= Unix(w.Start) && u <= Unix(w.End) {
					return true
				}
			}
			return false
		}
		changes := 0
		prev := false
		for u := u0; u <= u1; u++ {
			ok := c.ok(c.margins(u, tr.At(u)))
			if ok != in(u) && !near(u) {
				t.Fatalf("%s at %s: sampled %v, windows %v", src.Kind, FromUnix(u), ok, in(u))
			}
			if u > u0 && ok != prev {
				changes++
				if !near(u) && !near(u-1) {
					t.Errorf("%s: observability changes at %s with no window edge within 1 s", src.Kind, FromUnix(u))
				}
			}
			prev = ok
		}
		r := reasons(res)
		t.Logf("%s: %d windows, %d changes, reasons %v", src.Kind, len(res.Windows), changes, r)
		for k, v := range r {
			all[k] += v
		}
	}
	for _, r := range []string{ReasonAirmass, ReasonMoon, ReasonPWV, ReasonLSTStart, ReasonOutsideTime} {
		if all[r] == 0 {
			t.Errorf("no edge %s: %v", r, all)
		}
	}
}

// TestLSTMatchesSOFA: the fast LST (no leap-second lookup) is SOFA's Gmst06 plus the longitude
// within 1e-8 h (36 µs, the precision of a Julian date in two doubles) from 1970 to 2100.
func TestLSTMatchesSOFA(t *testing.T) {
	site := DefaultSite()
	for u := 0.0; u < 4.1e9; u += 7.77e6 {
		tt := (u + ttOffset(u)) / 86400
		want := math.Mod(gofa.Gmst06(unixJD, u/86400, unixJD, tt)+site.LongitudeDeg*deg+4*math.Pi, 2*math.Pi) / (2 * math.Pi) * 24
		if d := math.Abs(math.Remainder(LSTHours(&site, FromUnix(u))-want, 24)); d > 1e-8 {
			t.Fatalf("at %s: LST off by %g h", FromUnix(u), d)
		}
	}
}
