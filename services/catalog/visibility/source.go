package visibility

import (
	"fmt"
	"math"
)

// Source kinds: fixed (ICRS position with optional proper motion), solar_system (a named body
// whose position is computed for each time) and constant_elevation (a field scanned at one
// elevation across an azimuth range).
const (
	KindFixed             = "fixed"
	KindSolarSystem       = "solar_system"
	KindConstantElevation = "constant_elevation"
)

// planets maps a solar-system body to its SOFA Plan94 number; the Sun and Moon are 0 and -1.
var planets = map[string]int{"sun": 0, "moon": -1, "mercury": 1, "venus": 2, "mars": 4,
	"jupiter": 5, "saturn": 6, "uranus": 7, "neptune": 8}

// Bodies lists the solar-system bodies the engine knows.
func Bodies() []string {
	return []string{"sun", "moon", "mercury", "venus", "mars", "jupiter", "saturn", "uranus", "neptune"}
}

// Source is what the engine needs of a catalog source.
//
// Fixed: ICRS RADeg/DecDeg at Epoch (Julian year, default 2000), proper motion PMRA (µα* =
// dα/dt·cos δ, mas/yr) and PMDec; solar system: Body; constant elevation: a scan at ElevationDeg
// across azimuths AzMinDeg → AzMaxDeg (through east, wrapping past north when min > max).
type Source struct {
	Kind         string
	RADeg        float64
	DecDeg       float64
	PMRAMasYr    float64
	PMDecMasYr   float64
	Epoch        float64
	Body         string
	ElevationDeg float64
	AzMinDeg     float64
	AzMaxDeg     float64
}

// Fingerprint identifies the source's coordinates: a heatmap cached under another fingerprint is
// stale (the source was moved).
func (s *Source) Fingerprint() string {
	switch s.Kind {
	case KindSolarSystem:
		return "body=" + s.Body
	case KindConstantElevation:
		return fmt.Sprintf("el=%.10g az=%.10g..%.10g", s.ElevationDeg, s.AzMinDeg, s.AzMaxDeg)
	default:
		return fmt.Sprintf("ra=%.12g dec=%.12g pm=%.10g,%.10g ep=%.10g", s.RADeg, s.DecDeg, s.PMRAMasYr, s.PMDecMasYr, s.epoch())
	}
}

func (s *Source) epoch() float64 {
	if s.Epoch == 0 {
		return 2000
	}
	return s.Epoch
}

// Validate checks that the engine can compute the source.
func (s *Source) Validate() error {
	finite := func(v ...float64) bool {
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
		return true
	}
	switch s.Kind {
	case KindFixed:
		if !finite(s.RADeg, s.DecDeg, s.PMRAMasYr, s.PMDecMasYr, s.Epoch) || s.DecDeg < -90 || s.DecDeg > 90 {
			return &Invalid{"source", "fixed source needs finite ra_deg and dec_deg within [-90, 90]"}
		}
	case KindSolarSystem:
		if _, ok := planets[s.Body]; !ok {
			return &Invalid{"body", fmt.Sprintf("unknown solar-system body %q", s.Body)}
		}
	case KindConstantElevation:
		if !finite(s.ElevationDeg, s.AzMinDeg, s.AzMaxDeg) || s.ElevationDeg < 0 || s.ElevationDeg > 90 {
			return &Invalid{"source", "constant-elevation source needs elevation_deg within [0, 90] and an azimuth range"}
		}
	default:
		return &Invalid{"kind", fmt.Sprintf("unknown source kind %q", s.Kind)}
	}
	return nil
}

// azRange returns the scan's start azimuth and its (positive) extent in radians.
func (s *Source) azRange() (start, width float64) {
	a := math.Mod(s.AzMinDeg, 360)
	if a < 0 {
		a += 360
	}
	w := math.Mod(s.AzMaxDeg-s.AzMinDeg, 360)
	if w < 0 {
		w += 360
	}
	if w == 0 && s.AzMaxDeg != s.AzMinDeg {
		w = 360
	}
	return a * deg, w * deg
}
