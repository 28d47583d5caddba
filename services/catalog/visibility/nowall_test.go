package visibility

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/weather"
)

// TestNowAllAgainstNaive: the fast "now" evaluation (one instant, safe steps on shared tracks)
// against the naive one (Check, then Compute over the horizon per unit) for 300 sources — the
// special ones of the heatmap tests (circumpolar, never rising, grazing the limit, near the Sun,
// the Moon, a planet, the Sun, a constant-elevation scan) and random fixed ones — under every kind
// of obs-unit constraint (own elevation limit, airmass and Sun separation, Moon, LST range, PWV
// against a measurement and a rising forecast that ends, time windows) at three instants (night, day, dusk): the same observability and failing
// constraints, the same window end or next start (within 2 s: both are root-found to 0.5 s, from
// different brackets) and the same reasons. A window shorter than the naive grid's 10 minutes (a source grazing
// its limit) is found by the fast path and checked against the naive search on a 30-second grid.
func TestNowAllAgainstNaive(t *testing.T) {
	site := DefaultSite()
	srcs := heatmapSources(300)
	f := func(v float64) *float64 { return &v }
	units := make([]NowUnit, len(srcs))
	for i := range srcs {
		units[i].Source = srcs[i]
		switch i % 8 {
		case 1:
			units[i].Constraints = &ObsConstraints{MinElevationDeg: f(35)}
		case 2:
			units[i].Constraints = &ObsConstraints{MaxAirmass: f(1.5), MinSunSeparationDeg: f(60)}
		case 3:
			units[i].Constraints = &ObsConstraints{MinMoonSeparationDeg: f(40)}
		case 4:
			units[i].Constraints = &ObsConstraints{LSTRange: &LSTRange{StartHours: float64(i % 24), EndHours: float64((i + 5) % 24)}}
		case 5:
			units[i].Constraints = &ObsConstraints{MaxPWVmm: f(1.2)}
		case 6:
			units[i].Constraints = &ObsConstraints{MaxPWVmm: f(2), MinMoonSeparationDeg: f(20), MaxAirmass: f(2.5)}
		}
	}
	var ends, starts, short int
	for _, at := range []time.Time{
		time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC),
		time.Date(2026, 7, 14, 17, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 28, 23, 10, 0, 0, time.UTC),
	} {
		// PWV: a measurement 10 minutes ago (1.0 mm), a forecast run from now on rising 0.5 mm an
		// hour, ending 8 hours ahead (unknown after)
		issued := at.Add(-time.Hour)
		readings := []weather.Reading{{Kind: weather.KindMeasurement, Time: at.Add(-10 * time.Minute), PWVmm: 1.0, Source: "radiometer"}}
		for h := range 9 {
			readings = append(readings, weather.Reading{Kind: weather.KindForecast, Time: at.Add(time.Duration(h) * time.Hour), PWVmm: 0.8 + 0.5*float64(h), Source: "model", IssuedAt: &issued})
		}
		wx := weather.NewSeries(readings, at)
		for i := range units {
			if i%8 == 7 { // time windows: one closing in 90 minutes, one 10 hours ahead
				units[i].Constraints = &ObsConstraints{TimeWindows: []Interval{{Start: at.Add(-time.Hour), End: at.Add(90 * time.Minute)}, {Start: at.Add(10 * time.Hour), End: at.Add(14 * time.Hour)}}}
			}
		}
		got := NowAll(&site, units, wx, at, 24*time.Hour)
		for i := range units {
			want := NowOne(&site, &units[i], wx, at, 24*time.Hour)
			g := got[i]
			if (g.Next == nil) != (want.Next == nil) {
				// a window shorter than the naive 10-minute grid (a source grazing its limit): the
				// naive search on a 30-second grid decides
				want = nowOne(&site, &units[i], wx, at, 24*time.Hour, 30)
				short++
			}
			if g.Observable != want.Observable || fmt.Sprint(g.Failing, g.Unknown) != fmt.Sprint(want.Failing, want.Unknown) ||
				math.Abs(g.AltDeg-want.AltDeg) > 1e-9 || fmtPtr(g.PWVMarginMM) != fmtPtr(want.PWVMarginMM) {
				t.Fatalf("%s unit %d %+v: fast %+v, naive %+v", at, i, srcs[i], g, want)
			}
			same := func(a, b *time.Time) bool {
				if a == nil || b == nil {
					return a == nil && b == nil
				}
				d := a.Sub(*b)
				return d < 2*time.Second && d > -2*time.Second
			}
			if !same(g.Until, want.Until) || g.EndReason != want.EndReason {
				t.Errorf("%s unit %d %+v: until %v (%s), naive %v (%s)", at, i, srcs[i], g.Until, g.EndReason, want.Until, want.EndReason)
			}
			if !same(g.Next, want.Next) || g.StartReason != want.StartReason {
				t.Errorf("%s unit %d %+v: next %v (%s), naive %v (%s)", at, i, srcs[i], g.Next, g.StartReason, want.Next, want.StartReason)
			}
			if g.Until != nil && g.EndReason != ReasonRangeEnd {
				ends++
			}
			if g.Next != nil {
				starts++
			}
		}
	}
	t.Logf("%d window ends, %d starts compared; %d short windows checked on a 30-second grid", ends, starts, short)
	if ends < 100 || starts < 100 {
		t.Fatalf("too few edges compared: %d window ends, %d starts", ends, starts)
	}
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("%.9f", *v)
}
