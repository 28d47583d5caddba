package visibility

import (
	"math"
	"time"

	"github.com/hebl/gofa"
)

// Twilight limits: the Sun's geometric altitude (degrees) at which civil, nautical and
// astronomical twilight end.
const (
	SunsetAltDeg        = -0.833
	CivilTwilightDeg    = -6
	NauticalTwilightDeg = -12
	AstroTwilightDeg    = -18
)

// SkySample is the Sun and the Moon at one instant from the site, with the local sidereal time
// (what a night plot draws besides its sources).
type SkySample struct {
	Time       time.Time
	SunAltDeg  float64
	MoonAltDeg float64
	MoonAzDeg  float64
	LSTHours   float64
}

// Sky samples the Sun, the Moon and the LST at start + k·step up to end (fast tracks, as
// Compute).
func Sky(site *Site, start, end time.Time, step time.Duration) []SkySample {
	u0, u1 := Unix(start), Unix(end)
	sun := NewTrack(site, &Source{Kind: KindSolarSystem, Body: "sun"}, u0, u1)
	moon := NewTrack(site, &Source{Kind: KindSolarSystem, Body: "moon"}, u0, u1)
	n := SampleCount(start, end, step)
	out := make([]SkySample, 0, n)
	for k := range n {
		t := start.Add(time.Duration(k) * step)
		u := Unix(t)
		s, m := sun.At(u), moon.At(u)
		out = append(out, SkySample{Time: t, SunAltDeg: s.Alt / deg, MoonAltDeg: m.Alt / deg, MoonAzDeg: m.Az / deg,
			LSTHours: LSTHours(site, t)})
	}
	return out
}

// LSTHours is the local mean sidereal time at the site in hours [0, 24) (GMST, IAU 2006, with
// UT1 = UTC, plus the longitude).
func LSTHours(site *Site, t time.Time) float64 {
	u := Unix(t)
	tt := (u + ttOffset(u)) / 86400
	g := gofa.Gmst06(unixJD, u/86400, unixJD, tt) + site.LongitudeDeg*deg
	h := math.Mod(g/(2*math.Pi)*24, 24)
	if h < 0 {
		h += 24
	}
	return h
}

// SeparationAltAzDeg is the angle between two directions given by altitude and azimuth
// (degrees): e.g. a source and the Moon seen from the site.
func SeparationAltAzDeg(alt1, az1, alt2, az2 float64) float64 {
	a1, a2 := alt1*deg, alt2*deg
	c := math.Sin(a1)*math.Sin(a2) + math.Cos(a1)*math.Cos(a2)*math.Cos((az1-az2)*deg)
	return math.Acos(math.Max(-1, math.Min(1, c))) / deg
}
