package visibility

import (
	"math"
	"testing"
	"time"
)

// TestAtAgainstAstropy: the chip's single-instant position. Golden values from astropy 5.2
// (python3-astropy; IERS download off, UT1 = UTC, no refraction) for 2026-03-01T03:00:00Z at the
// FYST site (formerly the catalog's sky package tests).
func TestAtAgainstAstropy(t *testing.T) {
	site := DefaultSite()
	at := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                 string
		src                  Source
		wantAlt, wantAz, tol float64
	}{
		{"Vega", Source{Kind: KindFixed, RADeg: 279.2347, DecDeg: 38.7837}, -55.04248084219533, 54.4654618897065, 1.0 / 3600},
		{"Orion KL", Source{Kind: KindFixed, RADeg: 83.8221, DecDeg: -5.3911}, 36.8856676044024, 281.01563021931287, 1.0 / 3600},
		// bodies: astropy's get_body (DE ephemeris) against SOFA's analytical ones
		{"sun", Source{Kind: KindSolarSystem, Body: "sun"}, -50.313627521404094, 222.5542032778858, 0.01},
		{"moon", Source{Kind: KindSolarSystem, Body: "moon"}, 46.37979132963997, 356.998397584626, 0.01},
		{"jupiter", Source{Kind: KindSolarSystem, Body: "jupiter"}, 35.81886998182665, 325.8547173687657, 0.01},
	} {
		p := At(&site, &c.src, at)
		if math.Abs(p.AltDeg-c.wantAlt) > c.tol || math.Abs(math.Remainder(p.AzDeg-c.wantAz, 360))*math.Cos(p.AltDeg*deg) > c.tol {
			t.Errorf("%s: alt/az %.6f/%.6f, astropy %.6f/%.6f", c.name, p.AltDeg, p.AzDeg, c.wantAlt, c.wantAz)
		}
	}
}

// TestAtObservable: the limits the windows use decide observable_now.
func TestAtObservable(t *testing.T) {
	site := DefaultSite()
	at := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC) // Sun at -50°, azimuth 222.6°
	cases := []struct {
		name string
		src  Source
		want bool
	}{
		{"Orion KL at 36.9°, far from the Sun", Source{Kind: KindFixed, RADeg: 83.8221, DecDeg: -5.3911}, true},
		{"Vega below the horizon", Source{Kind: KindFixed, RADeg: 279.2347, DecDeg: 38.7837}, false},
		{"the Sun itself", Source{Kind: KindSolarSystem, Body: "sun"}, false},
		{"a scan at 10° (below the 20° limit)", Source{Kind: KindConstantElevation, ElevationDeg: 10, AzMinDeg: 350, AzMaxDeg: 10}, false},
		{"a scan at 60° away from the Sun", Source{Kind: KindConstantElevation, ElevationDeg: 60, AzMinDeg: 350, AzMaxDeg: 10}, true},
	}
	for _, c := range cases {
		if got := At(&site, &c.src, at).Observable; got != c.want {
			t.Errorf("%s: observable %v", c.name, got)
		}
	}
	// a scan reports the middle of its azimuth range, through north when min > max
	p := At(&site, &Source{Kind: KindConstantElevation, ElevationDeg: 60, AzMinDeg: 350, AzMaxDeg: 10}, at)
	if math.Abs(math.Remainder(p.AzDeg, 360)) > 1e-9 || p.AltDeg != 60 {
		t.Errorf("scan 350..10 at 60°: alt/az %v/%v", p.AltDeg, p.AzDeg)
	}
	// Sun avoidance: with a 179° avoidance nothing is observable
	wide := site
	wide.SunAvoidanceDeg = 179
	if At(&wide, &Source{Kind: KindFixed, RADeg: 83.8221, DecDeg: -5.3911}, at).Observable {
		t.Error("Sun avoidance of 179° still observable")
	}
}

// TestBodyICRS: a body's geocentric ICRS coordinates, treated as a fixed star, land where the
// engine puts the body itself to a few arcseconds (parallax and light deflection at a finite
// distance differ from a star's), and unknown bodies are an error.
func TestBodyICRS(t *testing.T) {
	site := DefaultSite()
	at := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	ra, dec, err := BodyICRS("jupiter", at)
	if err != nil {
		t.Fatal(err)
	}
	star := At(&site, &Source{Kind: KindFixed, RADeg: ra, DecDeg: dec}, at)
	body := At(&site, &Source{Kind: KindSolarSystem, Body: "jupiter"}, at)
	if math.Abs(star.AltDeg-body.AltDeg) > 5.0/3600 || math.Abs(star.AzDeg-body.AzDeg)*math.Cos(body.AltDeg*deg) > 5.0/3600 {
		t.Errorf("Jupiter from RA/Dec %.6f/%.6f: alt/az %.6f/%.6f, as a body %.6f/%.6f", ra, dec, star.AltDeg, star.AzDeg, body.AltDeg, body.AzDeg)
	}
	if _, _, err := BodyICRS("pluto", at); err == nil {
		t.Error("pluto: no error")
	}
}
