package visibility

import (
	"math"

	"github.com/hebl/gofa"
)

// Track evaluates one source's topocentric position over a time range, fast: the slow
// quantities come from nodes every 12 hours (interpolated), the Earth's rotation and the site's
// position are exact at every instant. Within 0.01" of Full for stars (tested).
type Track struct {
	site *Site
	src  Source
	obs  *observer
	tab  *nodes
	np   int
	// fixed sources: the geocentric CIRS unit vector at every node
	cirs [][3]float64
}

// Point is the position of a source at one instant (angles in radians).
type Point struct {
	Alt, Az float64
	SunSep  float64
	// HA is the hour angle (−π, π], used to find transits; NaN for constant-elevation scans.
	HA float64
}

// NewTrack prepares a source's track covering Unix times [u0, u1]. src must be valid.
func NewTrack(site *Site, src *Source, u0, u1 float64) *Track {
	np := 0
	if src.Kind == KindSolarSystem {
		np = planets[src.Body]
	}
	tab := newNodes(u0, u1, np)
	return newTrackOn(site, src, tab, newObserver(site))
}

// newTrackOn builds a track on an existing node table (which must carry the source's body).
func newTrackOn(site *Site, src *Source, tab *nodes, obs *observer) *Track {
	tr := &Track{site: site, src: *src, obs: obs, tab: tab}
	if src.Kind == KindSolarSystem {
		tr.np = planets[src.Body]
	}
	if src.Kind == KindFixed {
		tr.cirs = make([][3]float64, len(tab.n))
		pm := src.PMRAMasYr != 0 || src.PMDecMasYr != 0
		p := src.unitICRS(tab.n[0].u)
		for i := range tab.n {
			if pm {
				p = src.unitICRS(tab.n[i].u)
			}
			tr.cirs[i] = apparent(p, &tab.n[i].astrom)
		}
	}
	return tr
}

// At returns the position at Unix time u.
func (tr *Track) At(u float64) Point {
	i, f := tr.tab.at(u)
	a, b := &tr.tab.n[i], &tr.tab.n[i+1]
	e := era(u)
	site := tr.obs.siteCIRS(e)
	// the Sun, topocentric: geocentric apparent direction (interpolated) shifted by the parallax
	var sunC [3]float64
	d := (1-f)*a.sunD + f*b.sunD
	for k := range 3 {
		sunC[k] = ((1-f)*a.sunC[k]+f*b.sunC[k])*d - site[k]
	}
	norm(&sunC)

	var c [3]float64
	switch {
	case tr.src.Kind == KindConstantElevation:
		sunAz, sunAlt := tr.obs.altaz(sunC, e)
		return Point{Alt: tr.src.ElevationDeg * deg, Az: constAz(&tr.src), SunSep: arcSep(&tr.src, sunAlt, sunAz), HA: math.NaN()}
	case tr.src.Kind == KindSolarSystem:
		// exact per instant: topocentric astrometric position, then deflection and aberration
		var as gofa.ASTROM
		astromAt(a, b, f, &as)
		g := tr.obs.siteGCRS(e, &as)
		var p [3]float64
		if tr.np == 0 {
			p = hermite(&a.sun, &b.sun, f, nodeStep/86400)
		} else {
			k := bodyIndex(tr.np)
			p = hermite(&a.body[k], &b.body[k], f, nodeStep/86400)
		}
		for k := range 3 {
			p[k] -= g[k]
		}
		c = apparent(p, &as)
		if tr.np == 0 {
			sunC = c
		}
	default:
		ca, cb := tr.cirs[i], tr.cirs[i+1]
		for k := range 3 {
			c[k] = (1-f)*ca[k] + f*cb[k]
		}
		norm(&c)
	}
	az, alt := tr.obs.altaz(c, e)
	ha := math.Remainder(e+tr.obs.elong-math.Atan2(c[1], c[0]), 2*math.Pi)
	return Point{Alt: alt, Az: az, SunSep: sep(c, sunC), HA: ha}
}

func norm(v *[3]float64) {
	r := math.Sqrt(v[0]*v[0] + v[1]*v[1] + v[2]*v[2])
	v[0] /= r
	v[1] /= r
	v[2] /= r
}
