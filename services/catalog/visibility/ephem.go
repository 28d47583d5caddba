package visibility

import (
	"math"
	"time"

	"github.com/hebl/gofa"
)

const (
	deg       = math.Pi / 180
	unixJD    = 2440587.5         // JD of 1970-01-01T00:00Z
	auM       = gofa.DAU          // metres per au
	cAUPerDay = 86400 / gofa.AULT // speed of light in au/day
	// nodeStep is the spacing of the slowly varying quantities (precession-nutation, Earth's
	// position and velocity, bodies' geocentric positions), aligned to UTC midnight and noon.
	// Interpolated between nodes they stay within 0.002" of the exact value (nutation's 13.7-day
	// term dominates); the Earth's rotation is computed exactly at every instant.
	nodeStep = 43200.0
	// eraRate is the Earth rotation angle's rate, radians per second of UT1.
	eraRate = 2 * math.Pi * 1.00273781191135448 / 86400
)

// Unix converts a time to Unix seconds (float, sub-microsecond resolution for this century).
func Unix(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())*1e-9
}

// FromUnix converts Unix seconds back to a UTC time, rounded to the microsecond.
func FromUnix(u float64) time.Time {
	sec := math.Floor(u)
	ns := math.Round((u-sec)*1e6) * 1e3
	return time.Unix(int64(sec), int64(ns)).UTC()
}

// ttOffset returns TT − UTC in seconds at Unix time u (leap seconds from SOFA's table).
func ttOffset(u float64) float64 {
	var iy, im, id int
	var fd, dat float64
	gofa.Jd2cal(unixJD, u/86400, &iy, &im, &id, &fd)
	gofa.Dat(iy, im, id, fd, &dat) // a status of 1 ("dubious year") still gives the last known value
	return dat + 32.184
}

// era returns the Earth rotation angle at Unix time u with UT1 = UTC (IAU 2000, as SOFA Era00).
func era(u float64) float64 {
	d := (u - 946728000) / 86400 // days since J2000.0 (2000-01-01T12:00)
	f := d - math.Floor(d)
	t := 2 * math.Pi * (f + 0.7790572732640 + 0.00273781191135448*d)
	return t - 2*math.Pi*math.Floor(t/(2*math.Pi))
}

// node holds the slowly varying, site-independent quantities at one instant.
type node struct {
	u      float64
	astrom gofa.ASTROM      // geocentric ICRS→CIRS parameters (Apci)
	sun    [2][3]float64    // Sun, geocentric astrometric (light time applied), au and au/day
	sunC   [3]float64       // Sun, geocentric apparent CIRS unit vector
	sunD   float64          // Sun's distance, au
	body   [9][2][3]float64 // bodies asked for (Moon, planets; index bodyIndex), likewise
	pvh    [2][3]float64    // Earth, heliocentric (au, au/day)
	pvb    [2][3]float64    // Earth, barycentric
}

// bodyGeo returns a body's geocentric astrometric position (ICRS axes, light time applied) and
// its rate, from SOFA's ephemerides: Epv00 for the Earth and Sun, Moon98, Plan94 for planets.
func bodyGeo(np int, tt1, tt2 float64, pvh, pvb *[2][3]float64) (pv [2][3]float64) {
	// Sun's barycentric velocity: Earth's barycentric minus heliocentric.
	var vsun [3]float64
	for i := range 3 {
		vsun[i] = pvb[1][i] - pvh[1][i]
	}
	switch {
	case np == 0: // Sun: −(heliocentric Earth), moved back by the light time along its barycentric motion
		d := math.Sqrt(pvh[0][0]*pvh[0][0] + pvh[0][1]*pvh[0][1] + pvh[0][2]*pvh[0][2])
		lt := d / cAUPerDay
		for i := range 3 {
			pv[0][i] = -pvh[0][i] - lt*vsun[i]
			pv[1][i] = -pvh[1][i]
		}
	case np < 0: // Moon: geocentric (GCRS) from Moon98
		var m [2][3]float64
		gofa.Moon98(tt1, tt2, &m)
		d := math.Sqrt(m[0][0]*m[0][0] + m[0][1]*m[0][1] + m[0][2]*m[0][2])
		lt := d / cAUPerDay
		for i := range 3 {
			// barycentric Moon at t−lt minus barycentric Earth at t
			pv[0][i] = m[0][i] - lt*(m[1][i]+pvb[1][i])
			pv[1][i] = m[1][i]
		}
	default: // planet: heliocentric from Plan94 at the emission time, plus the Sun, minus the Earth
		var p [2][3]float64
		lt := 0.0
		for range 3 {
			gofa.Plan94(tt1, tt2-lt, np, &p)
			var r [3]float64
			for i := range 3 {
				r[i] = p[0][i] - pvh[0][i] - lt*vsun[i]
			}
			lt = math.Sqrt(r[0]*r[0]+r[1]*r[1]+r[2]*r[2]) / cAUPerDay
		}
		for i := range 3 {
			pv[0][i] = p[0][i] - pvh[0][i] - lt*vsun[i]
			pv[1][i] = p[1][i] - pvh[1][i]
		}
	}
	return pv
}

// slowStep is the spacing of the costliest models, the CIP's X, Y and the CIO locator s (SOFA
// Xys06a) and the Earth's heliocentric and barycentric position and velocity (Epv00),
// interpolated to the nodes by cubics: ≤ 0.004" for nutation's 13.7-day term, ≤ 10 km for the
// Earth's position.
const slowStep = 2 * 86400.0

// slow is what Xys06a and Epv00 give at one instant.
type slow [15]float64 // x, y, s, pvh (6), pvb (6)

func slowAt(u float64) (v slow) {
	tt2 := (u + ttOffset(u)) / 86400
	gofa.Xys06a(unixJD, tt2, &v[0], &v[1], &v[2])
	var pvh, pvb [2][3]float64
	gofa.Epv00(unixJD, tt2, &pvh, &pvb) // TDB ≈ TT (≤ 1.7 ms)
	for i := range 3 {
		v[3+i], v[6+i], v[9+i], v[12+i] = pvh[0][i], pvh[1][i], pvb[0][i], pvb[1][i]
	}
	return v
}

// bodyIndex is a body's slot in node.body: the Moon 0, planets by their Plan94 number.
func bodyIndex(np int) int {
	if np < 0 {
		return 0
	}
	return np
}

// makeNode computes the slow quantities at Unix time u, with the bodies listed (Plan94 numbers,
// −1 the Moon; the Sun is always there).
func makeNode(u float64, bodies []int, v *slow) node {
	n := node{u: u}
	tt2 := (u + ttOffset(u)) / 86400
	var pvh, pvb [2][3]float64
	for i := range 3 {
		pvh[0][i], pvh[1][i], pvb[0][i], pvb[1][i] = v[3+i], v[6+i], v[9+i], v[12+i]
	}
	gofa.Apci(unixJD, tt2, pvb, pvh[0], v[0], v[1], v[2], &n.astrom)
	n.pvh, n.pvb = pvh, pvb
	n.sun = bodyGeo(0, unixJD, tt2, &pvh, &pvb)
	n.sunC = apparent(n.sun[0], &n.astrom)
	n.sunD = math.Sqrt(n.sun[0][0]*n.sun[0][0] + n.sun[0][1]*n.sun[0][1] + n.sun[0][2]*n.sun[0][2])
	for _, np := range bodies {
		if np != 0 {
			n.body[bodyIndex(np)] = bodyGeo(np, unixJD, tt2, &pvh, &pvb)
		}
	}
	return n
}

// nodes is a table of nodes every nodeStep seconds covering a time range.
type nodes struct {
	first float64
	n     []node
	has   [9]bool // bodies present (bodyIndex)
}

// addBody adds a body's positions to every node (not safe for concurrent use).
func (t *nodes) addBody(np int) {
	if np == 0 || t.has[bodyIndex(np)] {
		return
	}
	for i := range t.n {
		n := &t.n[i]
		tt2 := (n.u + ttOffset(n.u)) / 86400
		n.body[bodyIndex(np)] = bodyGeo(np, unixJD, tt2, &n.pvh, &n.pvb)
	}
	t.has[bodyIndex(np)] = true
}

// newNodes covers [u0, u1] (with one node of margin each side), with the bodies listed.
func newNodes(u0, u1 float64, bodies ...int) *nodes {
	first := math.Floor(u0/nodeStep)*nodeStep - nodeStep
	last := math.Ceil(u1/nodeStep)*nodeStep + nodeStep
	// the slow models every slowStep from one step before first to two after last
	p0 := math.Floor(first/slowStep)*slowStep - slowStep
	var sl []slow
	for u := p0; u <= last+2*slowStep; u += slowStep {
		sl = append(sl, slowAt(u))
	}
	t := &nodes{first: first, n: make([]node, 0, int((last-first)/nodeStep)+1)}
	for u := first; u <= last; u += nodeStep {
		// cubic Lagrange through the four values around u
		x := (u - p0) / slowStep
		i := int(math.Floor(x)) - 1
		f := x - float64(i) - 1 // in [0, 1) between points i+1 and i+2
		w := [4]float64{-f * (f - 1) * (f - 2) / 6, (f + 1) * (f - 1) * (f - 2) / 2, -(f + 1) * f * (f - 2) / 2, (f + 1) * f * (f - 1) / 6}
		var v slow
		for k := range 4 {
			for c := range v {
				v[c] += w[k] * sl[i+k][c]
			}
		}
		t.n = append(t.n, makeNode(u, bodies, &v))
	}
	for _, np := range bodies {
		if np != 0 { // the Sun is in every node; slot 0 is the Moon's
			t.has[bodyIndex(np)] = true
		}
	}
	return t
}

// at finds the node interval [i, i+1] holding u and the fraction within it.
func (t *nodes) at(u float64) (i int, f float64) {
	x := (u - t.first) / nodeStep
	i = int(math.Floor(x))
	if i < 0 {
		i = 0
	}
	if i > len(t.n)-2 {
		i = len(t.n) - 2
	}
	return i, x - float64(i)
}

// astromAt interpolates the geocentric ICRS→CIRS parameters linearly between nodes.
func astromAt(a, b *node, f float64, out *gofa.ASTROM) {
	g := 1 - f
	aa, bb := &a.astrom, &b.astrom
	out.Pmt = g*aa.Pmt + f*bb.Pmt
	out.Em = g*aa.Em + f*bb.Em
	for i := range 3 {
		out.Eb[i] = g*aa.Eb[i] + f*bb.Eb[i]
		out.Eh[i] = g*aa.Eh[i] + f*bb.Eh[i]
		out.V[i] = g*aa.V[i] + f*bb.V[i]
		for j := range 3 {
			out.Bpn[i][j] = g*aa.Bpn[i][j] + f*bb.Bpn[i][j]
		}
	}
	v2 := out.V[0]*out.V[0] + out.V[1]*out.V[1] + out.V[2]*out.V[2]
	out.Bm1 = math.Sqrt(1 - v2)
}

// hermite interpolates a position from two position/velocity nodes h days apart (cubic).
func hermite(a, b *[2][3]float64, f, hDays float64) (p [3]float64) {
	f2, f3 := f*f, f*f*f
	h00 := 2*f3 - 3*f2 + 1
	h10 := f3 - 2*f2 + f
	h01 := -2*f3 + 3*f2
	h11 := f3 - f2
	for i := range 3 {
		p[i] = h00*a[0][i] + h10*hDays*a[1][i] + h01*b[0][i] + h11*hDays*b[1][i]
	}
	return p
}

// apparent turns an astrometric ICRS direction (any length) into the geocentric CIRS unit vector:
// light deflection by the Sun, annual aberration, bias-precession-nutation (SOFA Atciqz's steps).
func apparent(p [3]float64, as *gofa.ASTROM) (c [3]float64) {
	r := math.Sqrt(p[0]*p[0] + p[1]*p[1] + p[2]*p[2])
	for i := range 3 {
		p[i] /= r
	}
	var pnat, ppr [3]float64
	gofa.Ldsun(p, as.Eh, as.Em, &pnat)
	gofa.Ab(pnat, as.V, as.Em, as.Bm1, &ppr)
	gofa.Rxp(as.Bpn, ppr, &c)
	return c
}

// observer holds the site's CIRS→observed parameters (SOFA Apio with zero polar motion).
type observer struct {
	elong, phi, hm float64
	xyz            [3]float64 // site, geocentric terrestrial (m)
	sphi, cphi     float64
	diurab         float64
	refa, refb     float64
}

func newObserver(s *Site) *observer {
	o := &observer{elong: s.LongitudeDeg * deg, phi: s.LatitudeDeg * deg, hm: s.ElevationM}
	var as gofa.ASTROM
	gofa.Apio(0, 0, o.elong, o.phi, o.hm, 0, 0, 0, 0, &as)
	o.sphi, o.cphi, o.diurab = as.Sphi, as.Cphi, as.Diurab
	gofa.Gd2gc(1, o.elong, o.phi, o.hm, &o.xyz)
	if s.Refraction {
		gofa.Refco(s.pressure(), s.TemperatureC, s.RelativeHumidity, s.WavelengthUM, &o.refa, &o.refb)
	}
	return o
}

// siteCIRS returns the site's geocentric position in au, CIRS axes, at Earth rotation angle e
// (SOFA Pvtob for zero polar motion).
func (o *observer) siteCIRS(e float64) [3]float64 {
	s, c := math.Sincos(e)
	return [3]float64{(c*o.xyz[0] - s*o.xyz[1]) / auM, (s*o.xyz[0] + c*o.xyz[1]) / auM, o.xyz[2] / auM}
}

// siteGCRS returns the site's geocentric position in au, GCRS axes, at Earth rotation angle e.
func (o *observer) siteGCRS(e float64, as *gofa.ASTROM) (g [3]float64) {
	gofa.Trxp(as.Bpn, o.siteCIRS(e), &g)
	return g
}

// altaz turns a CIRS unit vector into observed azimuth and altitude (radians) at Earth rotation
// angle e: SOFA Atioq for zero polar motion, diurnal aberration and (optional) refraction.
func (o *observer) altaz(c [3]float64, e float64) (az, alt float64) {
	eral := e + o.elong
	se, ce := math.Sincos(eral)
	// rotate by −eral about z: CIRS → local [−HA, Dec] frame
	x := ce*c[0] + se*c[1]
	y := -se*c[0] + ce*c[1]
	z := c[2]
	f := 1 - o.diurab*y
	xhdt, yhdt, zhdt := f*x, f*(y+o.diurab), f*z
	xaet := o.sphi*xhdt - o.cphi*zhdt
	yaet := yhdt
	zaet := o.cphi*xhdt + o.sphi*zhdt
	az = 0.0
	if xaet != 0 || yaet != 0 {
		az = math.Atan2(yaet, -xaet)
	}
	if az < 0 {
		az += 2 * math.Pi
	}
	r := math.Sqrt(xaet*xaet + yaet*yaet)
	if o.refa == 0 && o.refb == 0 {
		return az, math.Atan2(zaet, r)
	}
	rr := math.Max(r, 1e-6)
	zz := math.Max(zaet, 0.05)
	tz := rr / zz
	w := o.refb * tz * tz
	del := (o.refa + w) * tz / (1 + (o.refa+3*w)/(zz*zz))
	cosdel := 1 - del*del/2
	f = cosdel - del*zz/rr
	xaeo, yaeo := xaet*f, yaet*f
	zaeo := cosdel*zaet + del*r
	return az, math.Atan2(zaeo, math.Sqrt(xaeo*xaeo+yaeo*yaeo))
}

// sep is the angle between two vectors (radians), accurate at all angles.
func sep(a, b [3]float64) float64 {
	cx := a[1]*b[2] - a[2]*b[1]
	cy := a[2]*b[0] - a[0]*b[2]
	cz := a[0]*b[1] - a[1]*b[0]
	return math.Atan2(math.Sqrt(cx*cx+cy*cy+cz*cz), a[0]*b[0]+a[1]*b[1]+a[2]*b[2])
}

// unitICRS returns the unit vector of a fixed source moved by its proper motion to Unix time u
// (SOFA Pmsafe: rigorous space motion, zero parallax and radial velocity, as astropy's
// apply_space_motion).
func (s *Source) unitICRS(u float64) [3]float64 {
	ra, dec := s.RADeg*deg, s.DecDeg*deg
	if s.PMRAMasYr != 0 || s.PMDecMasYr != 0 {
		cd := math.Cos(dec)
		pmr := 0.0
		if cd > 1e-12 {
			pmr = s.PMRAMasYr / 1000 * gofa.DAS2R / cd
		}
		pmd := s.PMDecMasYr / 1000 * gofa.DAS2R
		var e1, e2 float64
		gofa.Epj2jd(s.epoch(), &e1, &e2)
		var ra2, dec2, pmr2, pmd2, px2, rv2 float64
		tt2 := (u + ttOffset(u)) / 86400
		if gofa.Pmsafe(ra, dec, pmr, pmd, 0, 0, e1, e2, unixJD, tt2, &ra2, &dec2, &pmr2, &pmd2, &px2, &rv2) >= 0 {
			ra, dec = ra2, dec2
		}
	}
	var p [3]float64
	gofa.S2c(ra, dec, &p)
	return p
}

// Full computes one position with the complete SOFA pipeline at that instant (Apco13 + Atciq /
// Atciqz + Atioq): the reference the fast path is measured against, and the "naive" computation of
// the benchmark. Angles in degrees.
func Full(site *Site, src *Source, t time.Time) (altDeg, azDeg, sunSepDeg float64) {
	return newInstant(site, t).position(src)
}

// instant is the source-independent part of Full at one time (Apco13, the Earth's and the Sun's
// positions): computed once, it gives any number of sources' positions with exactly Full's
// arithmetic (the ranking of GET /visibility/now evaluates every obs unit at one instant).
type instant struct {
	u, tt2       float64
	astrom       gofa.ASTROM
	pvh, pvb     [2][3]float64
	sunAz, sunZd float64
	sunC         [3]float64
}

func newInstant(site *Site, t time.Time) *instant {
	in := &instant{u: Unix(t)}
	var eo float64
	phpa, tc, rh, wl := 0.0, 0.0, 0.0, 0.0
	if site.Refraction {
		phpa, tc, rh, wl = site.pressure(), site.TemperatureC, site.RelativeHumidity, site.WavelengthUM
	}
	gofa.Apco13(unixJD, in.u/86400, 0, site.LongitudeDeg*deg, site.LatitudeDeg*deg, site.ElevationM, 0, 0, phpa, tc, rh, wl, &in.astrom, &eo)
	in.tt2 = (in.u + ttOffset(in.u)) / 86400
	gofa.Epv00(unixJD, in.tt2, &in.pvh, &in.pvb)
	in.sunAz, in.sunZd, in.sunC = in.obs(in.rel(0))
	return in
}

// rel is a body's topocentric astrometric direction (relative to the observer: astrom.Eb is the
// site's barycentric position).
func (in *instant) rel(np int) [3]float64 {
	g := bodyGeo(np, unixJD, in.tt2, &in.pvh, &in.pvb)
	var p [3]float64
	for i := range 3 {
		p[i] = g[0][i] - (in.astrom.Eb[i] - in.pvb[0][i])
	}
	return p
}

// obs is the observed azimuth, zenith distance and CIRS direction of an astrometric direction.
func (in *instant) obs(p [3]float64) (az, zd float64, cirs [3]float64) {
	var ri, di, hob, dob, rob float64
	var ra, dec float64
	gofa.C2s(p, &ra, &dec)
	gofa.Atciqz(ra, dec, &in.astrom, &ri, &di)
	gofa.S2c(ri, di, &cirs)
	gofa.Atioq(ri, di, &in.astrom, &az, &zd, &hob, &dob, &rob)
	return az, zd, cirs
}

// position is Full's answer for one source (degrees).
func (in *instant) position(src *Source) (altDeg, azDeg, sunSepDeg float64) {
	switch src.Kind {
	case KindSolarSystem:
		az, zd, c := in.obs(in.rel(planets[src.Body]))
		return 90 - zd/deg, az / deg, sep(c, in.sunC) / deg
	case KindConstantElevation:
		az := constAz(src)
		return src.ElevationDeg, az / deg, arcSep(src, math.Pi/2-in.sunZd, in.sunAz) / deg
	default:
		az, zd, c := in.obs(src.unitICRS(in.u))
		return 90 - zd/deg, az / deg, sep(c, in.sunC) / deg
	}
}

// constAz is the azimuth reported for a constant-elevation scan: the middle of its range.
func constAz(src *Source) float64 {
	a, w := src.azRange()
	return math.Mod(a+w/2, 2*math.Pi)
}

// arcSep is the smallest angle between the Sun (altitude, azimuth in radians) and any point of a
// constant-elevation scan: the telescope must stay out of the avoidance zone for the whole scan.
func arcSep(src *Source, sunAlt, sunAz float64) float64 {
	a, w := src.azRange()
	d := math.Mod(sunAz-a, 2*math.Pi)
	if d < 0 {
		d += 2 * math.Pi
	}
	var daz float64 // azimuth distance from the Sun to the nearest point of the scan
	if d > w {
		daz = math.Min(d-w, 2*math.Pi-d)
	}
	e := src.ElevationDeg * deg
	se, ce := math.Sincos(e)
	ss, cs := math.Sincos(sunAlt)
	c := se*ss + ce*cs*math.Cos(daz)
	return math.Acos(math.Max(-1, math.Min(1, c)))
}
