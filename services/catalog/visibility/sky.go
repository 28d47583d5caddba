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
	h := lst(Unix(t), site.LongitudeDeg*deg) / (2 * math.Pi) * 24
	if h >= 24 {
		h -= 24
	}
	return h
}

// lst is the local mean sidereal time (radians, [0, 2π)) at Unix time u and east longitude elong:
// SOFA's Gmst06 — the Earth rotation angle plus the precession polynomial in TT — with TT − UTC
// taken as 69.184 s (its true value in other years moves the polynomial by under 0.0001"), so no
// leap-second lookup per call: the windows' LST margin evaluates it at every grid point.
func lst(u, elong float64) float64 {
	const j2000TT = 946727935.816 // 2000-01-01T12:00:00 TT in Unix seconds of UTC
	t := (u + 69.184 - j2000TT) / 86400 / 36525
	p := (0.014506 + (4612.156534+(1.3915817+(-0.00000044+(-0.000029956+(-0.0000000368)*t)*t)*t)*t)*t) * gofa.DAS2R
	g := math.Mod(era(u)+p+elong, 2*math.Pi)
	if g < 0 {
		g += 2 * math.Pi
	}
	return g
}

// SeparationAltAzDeg is the angle between two directions given by altitude and azimuth
// (degrees): e.g. a source and the Moon seen from the site.
func SeparationAltAzDeg(alt1, az1, alt2, az2 float64) float64 {
	a1, a2 := alt1*deg, alt2*deg
	c := math.Sin(a1)*math.Sin(a2) + math.Cos(a1)*math.Cos(a2)*math.Cos((az1-az2)*deg)
	return math.Acos(math.Max(-1, math.Min(1, c))) / deg
}
