package weather_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
)

func tp(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ptr(t time.Time) *time.Time { return &t }

// TestPWVAt: measurement for the past and now, the latest forecast for the future (and says
// which), unknown with no data — never a silent value.
func TestPWVAt(t *testing.T) {
	now := tp("2026-10-15T12:00:00Z")
	old, newer, future := ptr(tp("2026-10-15T00:00:00Z")), ptr(tp("2026-10-15T06:00:00Z")), ptr(tp("2026-10-15T13:00:00Z"))
	rs := []weather.Reading{
		{Kind: "measurement", Time: tp("2026-10-15T11:00:00Z"), PWVmm: 0.8, Source: "radiometer"},
		{Kind: "measurement", Time: tp("2026-10-15T11:50:00Z"), PWVmm: 0.9, Source: "radiometer"},
		{Kind: "measurement", Time: tp("2026-10-15T09:00:00Z"), PWVmm: 0.5, Source: "radiometer"},
		// the older run: everywhere 3 mm
		{Kind: "forecast", Time: tp("2026-10-15T12:00:00Z"), PWVmm: 3, Source: "model", IssuedAt: old},
		{Kind: "forecast", Time: tp("2026-10-15T18:00:00Z"), PWVmm: 3, Source: "model", IssuedAt: old},
		{Kind: "forecast", Time: tp("2026-10-16T00:00:00Z"), PWVmm: 3, Source: "model", IssuedAt: old},
		// the newer run covers only until 18:00
		{Kind: "forecast", Time: tp("2026-10-15T12:00:00Z"), PWVmm: 1, Source: "model", IssuedAt: newer},
		{Kind: "forecast", Time: tp("2026-10-15T18:00:00Z"), PWVmm: 2, Source: "model", IssuedAt: newer},
		// a run issued after now did not exist yet
		{Kind: "forecast", Time: tp("2026-10-15T15:00:00Z"), PWVmm: 9, Source: "model", IssuedAt: future},
	}
	s := weather.NewSeries(rs, now)
	check := func(at, kind string, want float64) weather.PWV {
		t.Helper()
		p := s.At(tp(at))
		require.Equal(t, kind, p.Kind, at)
		if kind == weather.KindUnknown {
			require.Nil(t, p.PWVmm, at)
		} else {
			require.InDelta(t, want, *p.PWVmm, 1e-9, at)
		}
		return p
	}
	check("2026-10-15T12:00:00Z", "measurement", 0.9)   // now: the latest measurement (10 min old)
	check("2026-10-15T11:10:00Z", "measurement", 0.8)   // the past: the one before
	check("2026-10-15T10:00:00Z", "unknown", 0)         // 60 min after the last before it: too old
	check("2026-10-15T08:00:00Z", "unknown", 0)         // before any measurement
	p := check("2026-10-15T15:00:00Z", "forecast", 1.5) // the newer run, interpolated
	require.Equal(t, *newer, *p.IssuedAt)
	check("2026-10-15T18:00:00Z", "forecast", 2)     // its last point
	p = check("2026-10-15T21:00:00Z", "forecast", 3) // beyond it: the older run
	require.Equal(t, *old, *p.IssuedAt)
	check("2026-10-16T06:00:00Z", "unknown", 0)                                     // no run covers it
	require.Equal(t, weather.KindUnknown, weather.NewSeries(nil, now).At(now).Kind) // no data at all
}

func TestReadingValidation(t *testing.T) {
	ok := func() weather.Reading {
		return weather.Reading{Kind: "measurement", Time: tp("2026-10-15T11:00:00Z"), PWVmm: 0.8, Source: "radiometer"}
	}
	for field, mutate := range map[string]func(*weather.Reading){
		"kind":      func(r *weather.Reading) { r.Kind = "guess" },
		"time":      func(r *weather.Reading) { r.Time = time.Time{} },
		"pwv_mm":    func(r *weather.Reading) { r.PWVmm = 51 },
		"source":    func(r *weather.Reading) { r.Source = " " },
		"issued_at": func(r *weather.Reading) { r.IssuedAt = ptr(r.Time) },
	} {
		r := ok()
		mutate(&r)
		err := r.Validate("body.items[3]")
		require.Error(t, err, field)
		var fe *problem.FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, "body.items[3]."+field, fe.Location)
	}
	f := ok()
	f.Kind = "forecast"
	require.Error(t, f.Validate("x"), "a forecast without its run")
	r := ok()
	require.NoError(t, r.Validate("x"))
}

// TestBreaks: the times where At may change otherwise than linearly, and only those: between two
// consecutive breaks At keeps its kind and reading or run (checked minute by minute).
func TestBreaks(t *testing.T) {
	now := tp("2026-10-15T12:00:00Z")
	issued, future := ptr(tp("2026-10-15T06:00:00Z")), ptr(tp("2026-10-15T13:00:00Z"))
	rs := []weather.Reading{
		{Kind: "measurement", Time: tp("2026-10-15T09:00:00Z"), PWVmm: 0.5, Source: "radiometer"},
		{Kind: "measurement", Time: tp("2026-10-15T11:50:00Z"), PWVmm: 0.9, Source: "radiometer"},
		{Kind: "measurement", Time: tp("2026-10-15T12:10:00Z"), PWVmm: 0.9, Source: "radiometer"}, // after now: not used
		{Kind: "forecast", Time: tp("2026-10-15T12:00:00Z"), PWVmm: 1, Source: "model", IssuedAt: issued},
		{Kind: "forecast", Time: tp("2026-10-15T14:00:00Z"), PWVmm: 2, Source: "model", IssuedAt: issued},
		{Kind: "forecast", Time: tp("2026-10-15T15:00:00Z"), PWVmm: 9, Source: "model", IssuedAt: future},
	}
	s := weather.NewSeries(rs, now)
	from, to := tp("2026-10-15T08:00:00Z"), tp("2026-10-15T16:00:00Z")
	want := []time.Time{tp("2026-10-15T09:00:00Z"), tp("2026-10-15T09:30:00Z"), tp("2026-10-15T11:50:00Z"), now, tp("2026-10-15T14:00:00Z")}
	require.Equal(t, want, s.Breaks(from, to))
	require.Equal(t, want[1:3], s.Breaks(tp("2026-10-15T09:00:00Z"), now), "open at both ends")
	// between breaks: same kind and same reading (measurement) or the same pair of points (forecast)
	bounds := append(append([]time.Time{from}, want...), to)
	for i := 0; i+1 < len(bounds); i++ {
		first := s.At(bounds[i].Add(time.Second))
		for tm := bounds[i].Add(time.Second); tm.Before(bounds[i+1]); tm = tm.Add(time.Minute) {
			got := s.At(tm)
			require.Equal(t, first.Kind, got.Kind, "at %s", tm)
			require.Equal(t, first.At, got.At, "at %s", tm)
		}
	}
}
