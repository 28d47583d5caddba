package visibility

import (
	"testing"
	"time"
)

// TestNowAllAgainstNaive: the fast "now" evaluation (one instant, safe steps on shared tracks)
// against the naive one (Compute over the horizon per unit) for 300 sources — the special ones of
// the heatmap tests (circumpolar, never rising, grazing the limit, near the Sun, the Moon, a
// planet, the Sun, a constant-elevation scan) and random fixed ones, some with their own
// elevation limit — at three instants (night, day, dusk): the same observability and failing
// constraints, the same window end or next start (within 2 s: both are root-found to 0.5 s, from
// different brackets) and the same reasons. A window shorter than the naive grid's 10 minutes (a source grazing
// its limit) is found by the fast path and checked against the naive search on a 30-second grid.
func TestNowAllAgainstNaive(t *testing.T) {
	site := DefaultSite()
	srcs := heatmapSources(300)
	units := make([]NowUnit, len(srcs))
	for i := range srcs {
		units[i].Source = srcs[i]
		if i%3 == 1 {
			el := 35.0
			units[i].MinElevationDeg = &el
		}
	}
	var ends, starts, short int
	for _, at := range []time.Time{
		time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC),
		time.Date(2026, 7, 14, 17, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 28, 23, 10, 0, 0, time.UTC),
	} {
		got := NowAll(&site, units, at, 24*time.Hour)
		for i := range units {
			want := NowOne(&site, &units[i], at, 24*time.Hour)
			g := got[i]
			if (g.Next == nil) != (want.Next == nil) {
				// a window shorter than the naive 10-minute grid (a source grazing its limit): the
				// naive search on a 30-second grid decides
				want = nowOne(&site, &units[i], at, 24*time.Hour, 30)
				short++
			}
			if g.Observable != want.Observable || len(g.Failing) != len(want.Failing) || g.AltDeg != want.AltDeg {
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
