package visibility

import (
	"fmt"
	"math"
	"time"

	"github.com/hebl/gofa"
)

// Position is where a source is at one instant and whether it is observable then (the catalog's
// source chip). Angles in degrees, with the engine's conventions: altitude geometric unless the
// site asks for refraction, azimuth from north through east, the Sun's separation as the
// windows use it (for a constant-elevation scan the closest point of the scan).
type Position struct {
	AltDeg, AzDeg, SunSepDeg float64
	// Observable: altitude within the site's elevation limits and at least the Sun avoidance
	// from the Sun (night is no constraint), exactly the windows' test.
	Observable bool
}

// At computes a valid source's position at t with the full SOFA pipeline (Full).
func At(site *Site, src *Source, t time.Time) Position {
	alt, az, sunSep := Full(site, src, t)
	c := newConstraints(site, nil, nil, nil, src, nil)
	ok := c.ok(c.margins(Unix(t), Point{Alt: alt * deg, Az: az * deg, SunSep: sunSep * deg}))
	return Position{AltDeg: alt, AzDeg: math.Mod(az+360, 360), SunSepDeg: sunSep, Observable: ok}
}

// BodyICRS is a solar-system body's geocentric astrometric ICRS direction at t (degrees, light
// time applied): the coordinates a chip shows for a body.
func BodyICRS(body string, t time.Time) (raDeg, decDeg float64, err error) {
	np, ok := planets[body]
	if !ok {
		return 0, 0, fmt.Errorf("visibility: unknown body %q", body)
	}
	u := Unix(t)
	tt2 := (u + ttOffset(u)) / 86400
	var pvh, pvb [2][3]float64
	gofa.Epv00(unixJD, tt2, &pvh, &pvb)
	g := bodyGeo(np, unixJD, tt2, &pvh, &pvb)
	var ra, dec float64
	gofa.C2s(g[0], &ra, &dec)
	return gofa.Anp(ra) / deg, dec / deg, nil
}
