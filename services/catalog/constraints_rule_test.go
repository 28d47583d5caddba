package catalog_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pkgproblem "github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// TestObsUnitConstraintsRule: the domain rule alone (PATCH relies on it) names each bad field, and
// normalises what it accepts (UTC, microseconds, [] as none).
func TestObsUnitConstraintsRule(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	day := time.Date(2026, 5, 10, 0, 0, 0, 0, time.UTC)
	win := func(a, b time.Duration) visibility.Interval {
		return visibility.Interval{Start: day.Add(a), End: day.Add(b)}
	}
	bad := map[string]catalog.ObsUnitConstraints{
		"max_airmass":             {MaxAirmass: f(0.99)},
		"min_moon_separation_deg": {MinMoonSeparationDeg: f(180.5)},
		"min_sun_separation_deg":  {MinSunSeparationDeg: f(-0.1)},
		"max_pwv_mm":              {MaxPWVmm: f(0)},
		"lst_range.start_hours":   {LSTRange: &visibility.LSTRange{StartHours: 24, EndHours: 1}},
		"lst_range.end_hours":     {LSTRange: &visibility.LSTRange{StartHours: 5, EndHours: 5}},
		"time_windows[0].end":     {TimeWindows: []visibility.Interval{win(time.Hour, time.Hour)}},
		"time_windows[1].start":   {TimeWindows: []visibility.Interval{win(0, time.Hour), win(time.Hour, 2*time.Hour)}},
		"time_windows[0].start":   {TimeWindows: []visibility.Interval{{Start: time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC), End: day}}},
		"time_windows":            {TimeWindows: make([]visibility.Interval, catalog.MaxTimeWindows+1)},
	}
	for field, c := range bad {
		err := c.Validate("body.obs_units[3]")
		var fe *pkgproblem.FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, "body.obs_units[3]."+field, fe.Location, "%v", err)
	}
	ok := catalog.ObsUnitConstraints{MaxAirmass: f(1), MinMoonSeparationDeg: f(0), MaxPWVmm: f(50), LSTRange: &visibility.LSTRange{StartHours: 23.5, EndHours: 0},
		TimeWindows: []visibility.Interval{{Start: day.In(time.FixedZone("x", 3600)), End: day.Add(time.Hour + 1500*time.Nanosecond)}}}
	require.NoError(t, ok.Validate("body.obs_units[0]"))
	require.Equal(t, time.UTC, ok.TimeWindows[0].Start.Location())
	require.Equal(t, day.Add(time.Hour+time.Microsecond), ok.TimeWindows[0].End)
	empty := catalog.ObsUnitConstraints{TimeWindows: []visibility.Interval{}}
	require.NoError(t, empty.Validate("body.obs_units[0]"))
	require.Nil(t, empty.TimeWindows)
}
