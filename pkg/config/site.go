package config

import (
	"time"
	_ "time/tzdata" // OPS_SITE_TIMEZONE must load in minimal images without /usr/share/zoneinfo
)

// Site is the observatory and its observing constraints (docs/configuration.md, "site"), read by every service that
// describes or computes with it (site: GET /site/info; catalog: the source chip and the visibility
// engine). One struct with one Validate, so every service accepts the same values.
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
	// TimeZone is the site's civil time zone (IANA name), for the local-time axis of plots.
	TimeZone string `env:"OPS_SITE_TIMEZONE" envDefault:"America/Santiago"`
}

// Location is the site's time zone (UTC if TimeZone does not load; Validate refuses that).
func (s *Site) Location() *time.Location {
	if s.TimeZone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// DefaultSite is the FYST site with its defaults (the envDefault values above).
func DefaultSite() Site {
	return Site{LatitudeDeg: -22.985639, LongitudeDeg: -67.740278, ElevationM: 5611.8,
		MinElevationDeg: 20, MaxElevationDeg: 90, SunAvoidanceDeg: 45,
		TemperatureC: 0, RelativeHumidity: 0.2, WavelengthUM: 850, TimeZone: "America/Santiago"}
}

// Validate checks that the site and its limits are physically meaningful (NaN fails every range).
func (s *Site) Validate() error {
	switch {
	case !(s.LatitudeDeg >= -90 && s.LatitudeDeg <= 90):
		return &Invalid{Var: "OPS_SITE_LATITUDE_DEG", Reason: "must be within [-90, 90]"}
	case !(s.LongitudeDeg >= -180 && s.LongitudeDeg <= 180):
		return &Invalid{Var: "OPS_SITE_LONGITUDE_DEG", Reason: "must be within [-180, 180] (east positive)"}
	case !(s.ElevationM > -500 && s.ElevationM < 10000):
		return &Invalid{Var: "OPS_SITE_ELEVATION_M", Reason: "must be within (-500, 10000)"}
	case !(s.MinElevationDeg >= 0 && s.MinElevationDeg < s.MaxElevationDeg):
		return &Invalid{Var: "OPS_SITE_MIN_ELEVATION_DEG", Reason: "must be >= 0 and below OPS_SITE_MAX_ELEVATION_DEG"}
	case !(s.MaxElevationDeg <= 90):
		return &Invalid{Var: "OPS_SITE_MAX_ELEVATION_DEG", Reason: "must be <= 90"}
	case !(s.SunAvoidanceDeg >= 0 && s.SunAvoidanceDeg <= 180):
		return &Invalid{Var: "OPS_SUN_AVOIDANCE_DEG", Reason: "must be within [0, 180]"}
	case !(s.PressureHPa >= 0 && s.PressureHPa < 1200):
		return &Invalid{Var: "OPS_SITE_PRESSURE_HPA", Reason: "must be within [0, 1200)"}
	case !(s.TemperatureC > -100 && s.TemperatureC < 60):
		return &Invalid{Var: "OPS_SITE_TEMPERATURE_C", Reason: "must be within (-100, 60)"}
	case !(s.RelativeHumidity >= 0 && s.RelativeHumidity <= 1):
		return &Invalid{Var: "OPS_SITE_RELATIVE_HUMIDITY", Reason: "must be within [0, 1]"}
	case !(s.WavelengthUM > 0):
		return &Invalid{Var: "OPS_SITE_WAVELENGTH_UM", Reason: "must be > 0"}
	}
	if _, err := time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "" {
		return &Invalid{Var: "OPS_SITE_TIMEZONE", Reason: "must be an IANA time zone name, e.g. America/Santiago or UTC"}
	}
	return nil
}
