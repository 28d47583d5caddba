package catalog

import (
	"fmt"
	"math"
	"time"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// Bounds of an obs unit's constraints (migration 00028 checks the same in the database).
const (
	MaxAirmassLimit = 40   // sec z of 1.4°: any higher is no limit at all
	MaxTimeWindows  = 1000 // time windows per obs unit (three years of nightly windows)
)

// ObsUnitConstraints are an obs unit's observing constraints besides min_elevation_deg. Each left
// out (or null) is no constraint; the site's limits (elevation, Sun avoidance) apply in any case,
// except that min_sun_separation_deg replaces the site's Sun avoidance radius for this unit.
type ObsUnitConstraints struct {
	MaxAirmass           *float64              `json:"max_airmass,omitempty" minimum:"1" maximum:"40" example:"2" doc:"Airmass (sec z) at most this: 1–40."`
	MinMoonSeparationDeg *float64              `json:"min_moon_separation_deg,omitempty" minimum:"0" maximum:"180" example:"30" doc:"Angle to the Moon (topocentric) at least this, degrees."`
	MinSunSeparationDeg  *float64              `json:"min_sun_separation_deg,omitempty" minimum:"0" maximum:"180" example:"60" doc:"Angle to the Sun at least this, degrees: replaces the site's Sun avoidance (OPS_SITE_SUN_AVOIDANCE_DEG) for this unit; 0: none."`
	MaxPWVmm             *float64              `json:"max_pwv_mm,omitempty" exclusiveMinimum:"0" maximum:"50" example:"1.5" doc:"Precipitable water vapour at most this, mm: measured for the past and now, the latest forecast for the future; without data the visibility reports it unknown."`
	LSTRange             *visibility.LSTRange  `json:"lst_range,omitempty" doc:"Local sidereal time within this range (hours; end before start wraps midnight)."`
	TimeWindows          []visibility.Interval `json:"time_windows,omitempty" maxItems:"1000" doc:"Only within these UTC intervals: start before end, sorted, neither overlapping nor touching."`
}

// Validate is the rule of an obs unit's constraints, with path the unit's location (e.g.
// "body.obs_units[2]"): each bound as the schema documents it, an LST range of two different hours
// in [0, 24), time windows within 1900–2100 with start before end, sorted and apart. Times are
// normalised to UTC.
func (c *ObsUnitConstraints) Validate(path string) error {
	bad := func(v *float64) bool { return v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) }
	switch {
	case bad(c.MaxAirmass) || c.MaxAirmass != nil && (*c.MaxAirmass < 1 || *c.MaxAirmass > MaxAirmassLimit):
		return problem.Field(path+".max_airmass", fmt.Sprintf("must be within [1, %d] (sec z)", MaxAirmassLimit), c.MaxAirmass)
	case bad(c.MinMoonSeparationDeg) || c.MinMoonSeparationDeg != nil && (*c.MinMoonSeparationDeg < 0 || *c.MinMoonSeparationDeg > 180):
		return problem.Field(path+".min_moon_separation_deg", "must be within [0, 180] degrees", c.MinMoonSeparationDeg)
	case bad(c.MinSunSeparationDeg) || c.MinSunSeparationDeg != nil && (*c.MinSunSeparationDeg < 0 || *c.MinSunSeparationDeg > 180):
		return problem.Field(path+".min_sun_separation_deg", "must be within [0, 180] degrees", c.MinSunSeparationDeg)
	case bad(c.MaxPWVmm) || c.MaxPWVmm != nil && (*c.MaxPWVmm <= 0 || *c.MaxPWVmm > weather.MaxPWVmm):
		return problem.Field(path+".max_pwv_mm", fmt.Sprintf("must be within (0, %d] mm", weather.MaxPWVmm), c.MaxPWVmm)
	case len(c.TimeWindows) > MaxTimeWindows:
		return problem.Field(path+".time_windows", fmt.Sprintf("at most %d windows", MaxTimeWindows), len(c.TimeWindows))
	}
	if r := c.LSTRange; r != nil {
		for f, h := range map[string]float64{"start_hours": r.StartHours, "end_hours": r.EndHours} {
			if math.IsNaN(h) || h < 0 || h >= 24 {
				return problem.Field(path+".lst_range."+f, "must be within [0, 24) hours", h)
			}
		}
		if r.StartHours == r.EndHours {
			return problem.Field(path+".lst_range.end_hours", "must differ from start_hours (leave lst_range out for no LST limit)", r.EndHours)
		}
	}
	if c.TimeWindows != nil && len(c.TimeWindows) == 0 {
		c.TimeWindows = nil // [] is no windows given: no constraint
	}
	for i := range c.TimeWindows {
		w := &c.TimeWindows[i]
		f := fmt.Sprintf("%s.time_windows[%d]", path, i)
		w.Start, w.End = w.Start.UTC().Truncate(time.Microsecond), w.End.UTC().Truncate(time.Microsecond) // as the database keeps them
		switch {
		case w.Start.Year() < 1900 || w.Start.Year() > 2100:
			return problem.Field(f+".start", "must be an RFC 3339 time within 1900–2100", w.Start)
		case w.End.Year() < 1900 || w.End.Year() > 2100:
			return problem.Field(f+".end", "must be an RFC 3339 time within 1900–2100", w.End)
		case !w.Start.Before(w.End):
			return problem.Field(f+".end", "must be after start", w.End)
		case i > 0 && !w.Start.After(c.TimeWindows[i-1].End):
			return problem.Field(f+".start", fmt.Sprintf("must be after the end of time_windows[%d] (sorted, not overlapping or touching: merge them)", i-1), w.Start)
		}
	}
	return nil
}

// Constraints are the unit's constraints as the visibility engine takes them (its
// min_elevation_deg included).
func (u *ObsUnit) Constraints() *visibility.ObsConstraints {
	c := u.ObsUnitConstraints
	return &visibility.ObsConstraints{MinElevationDeg: u.MinElevationDeg, MaxAirmass: c.MaxAirmass,
		MinMoonSeparationDeg: c.MinMoonSeparationDeg, MinSunSeparationDeg: c.MinSunSeparationDeg, MaxPWVmm: c.MaxPWVmm,
		LSTRange: c.LSTRange, TimeWindows: c.TimeWindows}
}
