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

	"github.com/obsops/obsops/pkg/config"
)

// Site is the observatory and its observing constraints as the engine uses them: the one site
// configuration (config.Site, the OPS_SITE_* variables every service reads) with the engine's
// derived values (refraction pressure, heatmap fingerprint).
type Site struct {
	config.Site
}

// DefaultSite is the FYST site with pkg/config's defaults (the OPS_SITE_* envDefault values).
func DefaultSite() Site { return Site{config.DefaultSite()} }

// Invalid names a parameter whose value is not acceptable (a source the engine cannot compute).
type Invalid struct {
	Field, Reason string
}

// Error is one line naming the field, as pkg/config's errors.
func (e *Invalid) Error() string { return e.Field + ": " + e.Reason }

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
