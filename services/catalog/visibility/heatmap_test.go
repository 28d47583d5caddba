package visibility

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// heatmapSources: random fixed sources plus the edge cases (circumpolar, never rising, the
// ecliptic, a high proper motion) and the other kinds.
func heatmapSources(n int) []Source {
	r := rand.New(rand.NewPCG(1, 2))
	srcs := []Source{
		{Kind: KindFixed, RADeg: 6.44, DecDeg: -77.25},                                           // circumpolar
		{Kind: KindFixed, RADeg: 37.95, DecDeg: 89.26},                                           // never rises
		{Kind: KindFixed, RADeg: 279.23, DecDeg: 38.78},                                          // barely above 20°
		{Kind: KindFixed, RADeg: 150, DecDeg: 12},                                                // ecliptic: Sun avoidance
		{Kind: KindFixed, RADeg: 269.45, DecDeg: 4.69, PMRAMasYr: -798.58, PMDecMasYr: 10328.12}, // Barnard's star
		{Kind: KindFixed, RADeg: 100, DecDeg: -23},                                               // through the zenith
		{Kind: KindSolarSystem, Body: "moon"},
		{Kind: KindSolarSystem, Body: "jupiter"},
		{Kind: KindSolarSystem, Body: "sun"},
		{Kind: KindConstantElevation, ElevationDeg: 40, AzMinDeg: 300, AzMaxDeg: 60},
	}
	for len(srcs) < n {
		srcs = append(srcs, Source{Kind: KindFixed, RADeg: r.Float64() * 360, DecDeg: math.Asin(2*r.Float64()-1) / deg})
	}
	return srcs
}

// TestHeatmapAgainstSampling checks the analytic heatmap against brute force: the source sampled
// every 10 minutes with the track (144 samples a day, each counting 10 minutes). Tolerance per
// source-day: 10 minutes for every change of observability in that day plus 1 minute (each edge is
// quantised by the grid by up to one step); and over all source-days the mean |difference| must
// stay under 4 minutes. Also an upper limit (80°) to exercise the zenith exclusion.
func TestHeatmapAgainstSampling(t *testing.T) {
	for _, maxEl := range []float64{90, 80} {
		site := DefaultSite()
		site.MaxElevationDeg = maxEl
		srcs := heatmapSources(30)
		y := NewYear(&site, 2026)
		hours, err := y.Hours(context.Background(), srcs, nil)
		if err != nil {
			t.Fatal(err)
		}
		var sumAbs float64
		var cells int
		for i := range srcs {
			tr := newTrackOn(&site, &srcs[i], y.tab, y.obs)
			c := newConstraints(&site, nil, nil, nil, &srcs[i], nil)
			for d := range y.days {
				var n, changes int
				prev := false
				for k := range 144 {
					u := y.u0 + float64(d)*86400 + float64(k)*600
					ok := c.ok(c.margins(u, tr.At(u)))
					if ok {
						n++
					}
					if k > 0 && ok != prev {
						changes++
					}
					prev = ok
				}
				brute := float64(n) / 6
				diff := math.Abs(hours[i][d] - brute)
				if diff > float64(changes)/6+1.0/60 {
					t.Errorf("max %v° source %d (%+v) day %d: heatmap %.3f h, sampling %.3f h (%d changes)", maxEl, i, srcs[i], d, hours[i][d], brute, changes)
				}
				sumAbs += diff
				cells++
			}
		}
		if mean := sumAbs / float64(cells) * 60; mean > 4 {
			t.Errorf("mean |difference| %.2f min over %d source-days", mean, cells)
		} else {
			t.Logf("max elevation %v°: mean |heatmap − 10-min sampling| = %.2f min over %d source-days", maxEl, mean, cells)
		}
	}
}

// TestHeatmapAgainstWindows: the analytic hours agree with Compute's root-found windows (the
// exact answer) within 1 minute per day.
func TestHeatmapAgainstWindows(t *testing.T) {
	site := DefaultSite()
	srcs := heatmapSources(12)
	y := NewYear(&site, 2026)
	hours, err := y.Hours(context.Background(), srcs, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	worst := 0.0
	for i := range srcs {
		for _, d := range []int{0, 45, 100, 180, 200, 222, 250, 300, 364} {
			day := start.AddDate(0, 0, d)
			res := Compute(&site, &srcs[i], Request{Start: day, End: day.Add(24 * time.Hour), Step: 10 * time.Minute})
			diff := math.Abs(res.HoursObservable - hours[i][d])
			worst = math.Max(worst, diff)
			if diff > 1.0/60 {
				t.Errorf("source %d (%+v) day %d: heatmap %.4f h, windows %.4f h", i, srcs[i], d, hours[i][d], res.HoursObservable)
			}
		}
	}
	t.Logf("worst difference to the windows: %.1f s", worst*3600)
}

func TestDaysIn(t *testing.T) {
	if DaysIn(2026) != 365 || DaysIn(2028) != 366 {
		t.Fatal(DaysIn(2026), DaysIn(2028))
	}
}
