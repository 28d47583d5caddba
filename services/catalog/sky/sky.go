// Package sky computes where a source is in the site's sky now: geometric altitude and azimuth
// of ICRS positions (SOFA's ICRS→observed transformation, github.com/hebl/gofa, without
// refraction), approximate geocentric positions of the Sun, Moon and planets, and the angular
// distance from the Sun. It is small on purpose: the visibility engine (issue 14) may reuse or
// replace it.
package sky

import (
	"errors"
	"math"
	"time"

	"github.com/hebl/gofa"
)

// Site is an observatory: geodetic latitude and east-positive longitude in degrees, height above
// the ellipsoid in metres.
type Site struct {
	LatDeg, LonDeg, HeightM float64
}

// Horizontal is a position in the site's sky.
type Horizontal struct {
	AltDeg float64 // geometric elevation (no refraction)
	AzDeg  float64 // from north through east, [0, 360)
}

const (
	d2r = math.Pi / 180
	r2d = 180 / math.Pi
	// earthRadiusAU is the Earth's equatorial radius in au (for the Moon's diurnal parallax).
	earthRadiusAU = 6378.137 / 149597870.7
)

// julian splits t (UTC) into SOFA's two-part UTC Julian date.
func julian(t time.Time) (float64, float64, error) {
	t = t.UTC()
	var d1, d2 float64
	sec := float64(t.Second()) + float64(t.Nanosecond())/1e9
	if gofa.Dtf2d("UTC", t.Year(), int(t.Month()), t.Day(), t.Hour(), t.Minute(), sec, &d1, &d2) < 0 {
		return 0, 0, errors.New("sky: unusable date")
	}
	return d1, d2, nil
}

// tt returns t as a two-part TT Julian date.
func tt(t time.Time) (float64, float64, error) {
	u1, u2, err := julian(t)
	if err != nil {
		return 0, 0, err
	}
	var a1, a2, t1, t2 float64
	if gofa.Utctai(u1, u2, &a1, &a2) < 0 || gofa.Taitt(a1, a2, &t1, &t2) != 0 {
		return 0, 0, errors.New("sky: unusable date")
	}
	return t1, t2, nil
}

// AltAz returns the geometric altitude and azimuth at t of an ICRS position (degrees) with
// proper motion (mas/yr, RA component including cos Dec; zero if unknown) at Julian epoch epoch
// (2000 if zero). UT1 is taken as UTC (under a second; about 15 arcsec at most) and polar motion
// as zero.
func AltAz(site Site, t time.Time, raDeg, decDeg, pmRAMasYr, pmDecMasYr, epoch float64) (Horizontal, error) {
	u1, u2, err := julian(t)
	if err != nil {
		return Horizontal{}, err
	}
	rc, dc := raDeg*d2r, decDeg*d2r
	// Atco13 wants dRA/dt (not times cos Dec) in rad/yr and the position at J2000.
	var pr, pd float64
	if c := math.Cos(dc); c > 1e-9 {
		pr = pmRAMasYr / 3.6e6 * d2r / c
	}
	pd = pmDecMasYr / 3.6e6 * d2r
	if epoch != 0 && epoch != 2000 {
		rc -= pr * (epoch - 2000)
		dc -= pd * (epoch - 2000)
	}
	var aob, zob, hob, dob, rob, eo float64
	if gofa.Atco13(rc, dc, pr, pd, 0, 0, u1, u2, 0, site.LonDeg*d2r, site.LatDeg*d2r, site.HeightM, 0, 0,
		0, 0, 0, 0, &aob, &zob, &hob, &dob, &rob, &eo) < 0 {
		return Horizontal{}, errors.New("sky: unusable date")
	}
	return Horizontal{AltDeg: 90 - zob*r2d, AzDeg: math.Mod(aob*r2d+360, 360)}, nil
}

// Bodies are the solar-system bodies BodyPosition knows.
var planets = map[string]int{"mercury": 1, "venus": 2, "mars": 4, "jupiter": 5, "saturn": 6, "uranus": 7, "neptune": 8}

// BodyPosition returns the geocentric ICRS direction (degrees) and distance (au) of the Sun,
// the Moon or a planet at t, from SOFA's analytical ephemerides (Epv00, Moon98, Plan94: arcsecond
// to arcminute accuracy, no light-time correction), enough for pointing cards and Sun avoidance.
func BodyPosition(body string, t time.Time) (raDeg, decDeg, distAU float64, err error) {
	t1, t2, err := tt(t)
	if err != nil {
		return 0, 0, 0, err
	}
	var pvh, pvb [2][3]float64
	gofa.Epv00(t1, t2, &pvh, &pvb)
	var v [3]float64
	switch body {
	case "sun":
		v = [3]float64{-pvh[0][0], -pvh[0][1], -pvh[0][2]}
	case "moon":
		var pv [2][3]float64
		gofa.Moon98(t1, t2, &pv)
		v = pv[0]
	default:
		np, ok := planets[body]
		if !ok {
			return 0, 0, 0, errors.New("sky: unknown body " + body)
		}
		var pv [2][3]float64
		if gofa.Plan94(t1, t2, np, &pv) < 0 {
			return 0, 0, 0, errors.New("sky: ephemeris failed")
		}
		v = [3]float64{pv[0][0] - pvh[0][0], pv[0][1] - pvh[0][1], pv[0][2] - pvh[0][2]}
	}
	var th, ph float64
	gofa.C2s(v, &th, &ph)
	raDeg = math.Mod(gofa.Anp(th)*r2d, 360)
	return raDeg, ph * r2d, math.Sqrt(v[0]*v[0] + v[1]*v[1] + v[2]*v[2]), nil
}

// BodyAltAz returns where a solar-system body is in the site's sky at t, with the Moon's
// diurnal parallax (up to a degree) applied.
func BodyAltAz(site Site, body string, t time.Time) (Horizontal, float64, float64, error) {
	ra, dec, dist, err := BodyPosition(body, t)
	if err != nil {
		return Horizontal{}, 0, 0, err
	}
	h, err := AltAz(site, t, ra, dec, 0, 0, 0)
	if err != nil {
		return Horizontal{}, 0, 0, err
	}
	if body == "moon" {
		h.AltDeg -= math.Asin(earthRadiusAU/dist*math.Cos(h.AltDeg*d2r)) * r2d
	}
	return h, ra, dec, nil
}

// Separation is the angle in degrees between two horizontal positions.
func Separation(a, b Horizontal) float64 {
	return gofa.Seps(a.AzDeg*d2r, a.AltDeg*d2r, b.AzDeg*d2r, b.AltDeg*d2r) * r2d
}

// Limits decide whether a position is observable: elevation within [MinElevationDeg,
// MaxElevationDeg] and at least SunAvoidanceDeg from the Sun.
type Limits struct {
	MinElevationDeg, MaxElevationDeg, SunAvoidanceDeg float64
}

// Observable reports whether h is observable with the Sun at sun.
func (l Limits) Observable(h, sun Horizontal) bool {
	return h.AltDeg >= l.MinElevationDeg && h.AltDeg <= l.MaxElevationDeg && Separation(h, sun) >= l.SunAvoidanceDeg
}

// AzimuthMid is the middle of an azimuth range from min to max (clockwise, through north when
// min > max).
func AzimuthMid(minDeg, maxDeg float64) float64 {
	span := maxDeg - minDeg
	if span < 0 {
		span += 360
	}
	return math.Mod(minDeg+span/2, 360)
}
