// Package visibility computes where a source is in the sky of the site, when it can be observed
// and for how long: topocentric altitude and azimuth to the arcsecond (IAU SOFA via
// github.com/hebl/gofa), observing windows with root-found edges, rise/set/transit, and a fast
// hours-observable heatmap. It knows nothing of HTTP or the database.
//
// Conventions: altitude is geometric (no refraction) unless Site.Refraction is set; azimuth is
// measured from north through east; airmass is sec z (plane-parallel), null below the horizon;
// UT1 = UTC and polar motion is zero (both under 1 s / 0.3" here); times are UTC.
package visibility

import (
	"fmt"
	"math"
)

// Site is the observatory and its observing constraints (DESIGN §7). The env tags are the same
// OPS_SITE_* variables the site service reads, so both describe one observatory.
type Site struct {
	LatitudeDeg     float64 `env:"OPS_SITE_LATITUDE_DEG" envDefault:"-22.985639"`
	LongitudeDeg    float64 `env:"OPS_SITE_LONGITUDE_DEG" envDefault:"-67.740278"`
	ElevationM      float64 `env:"OPS_SITE_ELEVATION_M" envDefault:"5611.8"`
	MinElevationDeg float64 `env:"OPS_SITE_MIN_ELEVATION_DEG" envDefault:"20"`
	MaxElevationDeg float64 `env:"OPS_SITE_MAX_ELEVATION_DEG" envDefault:"90"`
	SunAvoidanceDeg float64 `env:"OPS_SUN_AVOIDANCE_DEG" envDefault:"45"`
	// Refraction switches from geometric to refracted (observed) altitudes, computed with SOFA's
	// refraction model for the conditions below.
	Refraction bool `env:"OPS_SITE_REFRACTION" envDefault:"false"`
	// PressureHPa is the ambient pressure for refraction; 0 derives it from the elevation
	// (standard atmosphere, about 505 hPa at the FYST site).
	PressureHPa      float64 `env:"OPS_SITE_PRESSURE_HPA" envDefault:"0"`
	TemperatureC     float64 `env:"OPS_SITE_TEMPERATURE_C" envDefault:"0"`
	RelativeHumidity float64 `env:"OPS_SITE_RELATIVE_HUMIDITY" envDefault:"0.2"`
	// WavelengthUM selects SOFA's optical (< 100 µm) or radio (≥ 100 µm) refraction formula.
	WavelengthUM float64 `env:"OPS_SITE_WAVELENGTH_UM" envDefault:"850"`
}

// DefaultSite is the FYST site with the defaults of DESIGN §7.
func DefaultSite() Site {
	return Site{LatitudeDeg: -22.985639, LongitudeDeg: -67.740278, ElevationM: 5611.8,
		MinElevationDeg: 20, MaxElevationDeg: 90, SunAvoidanceDeg: 45,
		TemperatureC: 0, RelativeHumidity: 0.2, WavelengthUM: 850}
}

// Invalid names a setting or parameter whose value is not acceptable.
type Invalid struct {
	Field, Reason string
}

// Error is one line naming the field, as pkg/config's errors.
func (e *Invalid) Error() string { return e.Field + ": " + e.Reason }

// Validate checks that the site and its limits are physically meaningful.
func (s *Site) Validate() error {
	switch {
	case !(s.LatitudeDeg >= -90 && s.LatitudeDeg <= 90):
		return &Invalid{"OPS_SITE_LATITUDE_DEG", "must be within [-90, 90]"}
	case !(s.LongitudeDeg >= -180 && s.LongitudeDeg <= 180):
		return &Invalid{"OPS_SITE_LONGITUDE_DEG", "must be within [-180, 180] (east positive)"}
	case !(s.ElevationM > -500 && s.ElevationM < 10000):
		return &Invalid{"OPS_SITE_ELEVATION_M", "must be within (-500, 10000)"}
	case !(s.MinElevationDeg >= 0 && s.MinElevationDeg < s.MaxElevationDeg):
		return &Invalid{"OPS_SITE_MIN_ELEVATION_DEG", "must be >= 0 and below OPS_SITE_MAX_ELEVATION_DEG"}
	case !(s.MaxElevationDeg <= 90):
		return &Invalid{"OPS_SITE_MAX_ELEVATION_DEG", "must be <= 90"}
	case !(s.SunAvoidanceDeg >= 0 && s.SunAvoidanceDeg <= 180):
		return &Invalid{"OPS_SUN_AVOIDANCE_DEG", "must be within [0, 180]"}
	case !(s.PressureHPa >= 0 && s.PressureHPa < 1200):
		return &Invalid{"OPS_SITE_PRESSURE_HPA", "must be within [0, 1200)"}
	case !(s.TemperatureC > -100 && s.TemperatureC < 60):
		return &Invalid{"OPS_SITE_TEMPERATURE_C", "must be within (-100, 60)"}
	case !(s.RelativeHumidity >= 0 && s.RelativeHumidity <= 1):
		return &Invalid{"OPS_SITE_RELATIVE_HUMIDITY", "must be within [0, 1]"}
	case !(s.WavelengthUM > 0):
		return &Invalid{"OPS_SITE_WAVELENGTH_UM", "must be > 0"}
	}
	return nil
}

// pressure is the refraction pressure in hPa: the setting, or the standard atmosphere at the site.
func (s *Site) pressure() float64 {
	if s.PressureHPa > 0 {
		return s.PressureHPa
	}
	return 1013.25 * math.Exp(-s.ElevationM/8149.9415) // SOFA's Apco13 convention for a missing pressure
}

// Fingerprint identifies everything about the site that changes a heatmap: cached hours computed
// under another fingerprint are stale. The refraction conditions count only when refraction is on.
func (s *Site) Fingerprint() string {
	f := fmt.Sprintf("lat=%.9g lon=%.9g h=%.6g el=%.6g..%.6g sun=%.6g",
		s.LatitudeDeg, s.LongitudeDeg, s.ElevationM, s.MinElevationDeg, s.MaxElevationDeg, s.SunAvoidanceDeg)
	if s.Refraction {
		f += fmt.Sprintf(" refr p=%.6g t=%.6g rh=%.4g wl=%.6g", s.PressureHPa, s.TemperatureC, s.RelativeHumidity, s.WavelengthUM)
	}
	return f
}
