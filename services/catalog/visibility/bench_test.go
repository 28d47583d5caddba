package visibility

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestBenchHeatmap (OPS_BENCH=1, `make bench`): the heatmap of 5,000 sources × 365 days computed
// cold (nothing precomputed), next to the same computation done naively: the full SOFA pipeline
// (Apco13, Atciq, Atioq, for the source and the Sun) at every 10-minute sample. The naive time is
// measured on a subset and extrapolated (it would take hours). Also one source, one year at
// 10-minute steps with windows.
func TestBenchHeatmap(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	site := DefaultSite()
	srcs := heatmapSources(5000)
	var best time.Duration
	for run := range 3 {
		runtime.GC()
		t0 := time.Now()
		y := NewYear(&site, 2026)
		if _, err := y.Hours(context.Background(), srcs, nil); err != nil {
			t.Fatal(err)
		}
		el := time.Since(t0)
		t.Logf("heatmap cold, run %d: %d sources × %d days in %s (GOMAXPROCS %d)", run+1, len(srcs), y.Days(), el.Round(time.Millisecond), runtime.GOMAXPROCS(0))
		if run == 0 || el < best {
			best = el
		}
	}
	// naive: full pipeline per 10-minute sample, on 3 sources × 2 days, extrapolated
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	sub := srcs[10:13]
	samples := 0
	t0 := time.Now()
	for i := range sub {
		for k := range 2 * 144 {
			Full(&site, &sub[i], start.Add(time.Duration(k)*10*time.Minute))
			samples++
		}
	}
	per := time.Since(t0) / time.Duration(samples)
	naive := per * time.Duration(len(srcs)*365*144)
	t.Logf("naive (full SOFA pipeline at every 10-minute sample): %s per sample, measured on %d samples, EXTRAPOLATED to %d sources × 365 days × 144 samples: %s",
		per, samples, len(srcs), naive.Round(time.Second))
	t.Logf("RESULT heatmap 5000×365 cold: %s (target ≤ 2 s): %s; naive %s (EXTRAPOLATED); %.0f× faster", best.Round(time.Millisecond), verdict(best <= 2*time.Second), naive.Round(time.Second), float64(naive)/float64(best))

	one := Source{Kind: KindFixed, RADeg: 83.6, DecDeg: 22}
	var bestOne time.Duration
	for run := range 5 {
		t0 := time.Now()
		res := Compute(&site, &one, Request{Start: start, End: start.AddDate(1, 0, 0), Step: 10 * time.Minute})
		el := time.Since(t0)
		if run == 0 || el < bestOne {
			bestOne = el
		}
		_ = res
	}
	t.Logf("RESULT one source, one year at 10-minute steps with windows: %s (target ≤ 100 ms): %s", bestOne.Round(100*time.Microsecond), verdict(bestOne <= 100*time.Millisecond))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
