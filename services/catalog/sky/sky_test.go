package sky_test

import (
	"math"
	"testing"
	"time"

	"github.com/obsops/obsops/services/catalog/sky"
)

var fyst = sky.Site{LatDeg: -22.985639, LonDeg: -67.740278, HeightM: 5611.8}

// Golden values from astropy 5.2 (python3-astropy; IERS download off, UT1 = UTC, no refraction)
// for 2026-03-01T03:00:00Z at the FYST site.
func TestAltAzAgainstAstropy(t *testing.T) {
	at := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                 string
		ra, dec              float64
		wantAlt, wantAz, tol float64
	}{
		{"Vega", 279.2347, 38.7837, -55.04248084219533, 54.4654618897065, 2.0 / 3600},
		{"Orion KL", 83.8221, -5.3911, 36.8856676044024, 281.01563021931287, 2.0 / 3600},
	} {
		h, err := sky.AltAz(fyst, at, c.ra, c.dec, 0, 0, 2000)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(h.AltDeg-c.wantAlt) > c.tol || math.Abs(h.AzDeg-c.wantAz)*math.Cos(h.AltDeg*math.Pi/180) > c.tol {
			t.Errorf("%s: alt/az %.6f/%.6f, astropy %.6f/%.6f", c.name, h.AltDeg, h.AzDeg, c.wantAlt, c.wantAz)
		}
	}
	// Bodies from analytical ephemerides: within 0.1 degree of astropy's get_body.
	for _, c := range []struct {
		body            string
		wantAlt, wantAz float64
	}{
		{"sun", -50.313627521404094, 222.5542032778858},
		{"moon", 46.37979132963997, 356.998397584626},
		{"jupiter", 35.81886998182665, 325.8547173687657},
	} {
		h, _, _, err := sky.BodyAltAz(fyst, c.body, at)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(h.AltDeg-c.wantAlt) > 0.1 || math.Abs(h.AzDeg-c.wantAz)*math.Cos(h.AltDeg*math.Pi/180) > 0.1 {
			t.Errorf("%s: alt/az %.4f/%.4f, astropy %.4f/%.4f", c.body, h.AltDeg, h.AzDeg, c.wantAlt, c.wantAz)
		}
	}
}

func TestObservable(t *testing.T) {
	l := sky.Limits{MinElevationDeg: 20, MaxElevationDeg: 90, SunAvoidanceDeg: 45}
	sun := sky.Horizontal{AltDeg: 10, AzDeg: 90}
	if !l.Observable(sky.Horizontal{AltDeg: 50, AzDeg: 270}, sun) {
		t.Error("high, far from the Sun: observable")
	}
	if l.Observable(sky.Horizontal{AltDeg: 19.9, AzDeg: 270}, sun) {
		t.Error("below the elevation limit")
	}
	if l.Observable(sky.Horizontal{AltDeg: 30, AzDeg: 100}, sun) {
		t.Error("within the Sun avoidance")
	}
	if got := sky.AzimuthMid(350, 10); got != 0 {
		t.Errorf("mid of 350..10 = %v", got)
	}
}
