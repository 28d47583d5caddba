package resolve_test

import (
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/obsops/obsops/services/catalog/resolve"
)

// sexagesimal parses hh:mm:ss / ±dd:mm:ss (test-side, independent of the generator).
func sexagesimal(t *testing.T, s string, hours bool) float64 {
	t.Helper()
	neg := strings.HasPrefix(s, "-")
	var v, scale float64 = 0, 1
	for _, p := range strings.Split(strings.TrimLeft(s, "+-"), ":") {
		var x float64
		if _, err := fmtSscan(p, &x); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		v += x / scale
		scale *= 60
	}
	if hours {
		v *= 15
	}
	if neg {
		v = -v
	}
	return v
}

func sepArcsec(ra1, dec1, ra2, dec2 float64) float64 {
	const rad = math.Pi / 180
	c := math.Sin(dec1*rad)*math.Sin(dec2*rad) + math.Cos(dec1*rad)*math.Cos(dec2*rad)*math.Cos((ra1-ra2)*rad)
	return math.Acos(math.Min(1, c)) / rad * 3600
}

// TestCuratedTargetsResolve: every name and alias of data/curated.tsv resolves to the curated
// entry at the published position, with its bibcode, and the proper motion where one is given.
func TestCuratedTargetsResolve(t *testing.T) {
	l, err := resolve.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("data/curated.tsv")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 11 || f[0] != "O" {
			continue
		}
		n++
		ra, dec := sexagesimal(t, f[2], true), sexagesimal(t, f[3], false)
		for _, name := range append([]string{f[1]}, strings.Split(f[9], "|")...) {
			o, ok := l.Lookup(name)
			if !ok {
				t.Errorf("%q (%s): not found", name, f[1])
				continue
			}
			if strings.HasPrefix(o.Reference, "OpenNGC") && f[10] != "" {
				// The alias is also an OpenNGC object's own name (IC 4553 for Arp 220): within the
				// cross-check's tolerance.
				if sep := sepArcsec(o.RADeg, o.DecDeg, ra, dec); sep > 2 {
					t.Errorf("%q: OpenNGC's %s is %.2f″ away", name, o.Name, sep)
				}
				continue
			}
			if o.Name != f[1] || o.Reference != f[8] {
				t.Errorf("%q: %s (%s), want %s (%s)", name, o.Name, o.Reference, f[1], f[8])
			}
			if sep := sepArcsec(o.RADeg, o.DecDeg, ra, dec); sep > 0.01 {
				t.Errorf("%q: %.3f″ from the published position", name, sep)
			}
			if (f[5] != "") != (o.PMRAMasYr != nil) {
				t.Errorf("%q: proper motion %v, curated %q", name, o.PMRAMasYr, f[5])
			}
		}
	}
	if n < 20 {
		t.Fatalf("%d curated targets, want at least 20", n)
	}
}

// TestRandomNGCICPositions: 100 NGC/IC objects drawn at random (fixed seed) from OpenNGC's CSV,
// looked up by their usual spellings, are at the CSV's position within 1″.
func TestRandomNGCICPositions(t *testing.T) {
	l, err := resolve.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open("data/openngc/NGC.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r := csv.NewReader(fh)
	r.Comma = ';'
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var pool [][]string
	for _, row := range rows[1:] {
		if row[1] != "Dup" && row[1] != "NonEx" && row[2] != "" && row[23] == "" { // Messier objects are named M…
			pool = append(pool, row)
		}
	}
	rng := rand.New(rand.NewPCG(26, 5))
	for i := range 100 {
		row := pool[rng.IntN(len(pool))]
		id := row[0] // NGC0253, IC4553, NGC5194A
		cat := "NGC"
		if strings.HasPrefix(id, "IC") {
			cat = "IC"
		}
		num := strings.TrimLeft(strings.TrimPrefix(id, cat), "0")
		spelling := []string{id, cat + " " + num, strings.ToLower(cat) + num}[i%3]
		o, ok := l.Lookup(spelling)
		if !ok {
			t.Errorf("%q: not found", spelling)
			continue
		}
		ra, dec := sexagesimal(t, row[2], true), sexagesimal(t, row[3], false)
		if sep := sepArcsec(o.RADeg, o.DecDeg, ra, dec); sep > 1 {
			t.Errorf("%q: %s at %.2f″ from OpenNGC's %s", spelling, o.Name, sep, id)
		}
	}
}

// TestOnlineDisabledSaysWhereItLooked: without Sesame the answer lists the resolvers asked and
// the resolver says online resolution is disabled.
func TestOnlineDisabledSaysWhereItLooked(t *testing.T) {
	l, err := resolve.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	r := &resolve.Resolver{Local: l}
	if got := r.OnlineState(); got != resolve.OnlineDisabled {
		t.Fatalf("OnlineState %q", got)
	}
	out, err := r.Resolve(t.Context(), []string{"no such object", "Sgr A*"})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Found || strings.Join(out[0].Asked, ",") != "coordinates,local_catalog" {
		t.Errorf("not found: %+v", out[0])
	}
	if !out[1].Found || out[1].Reference != "2004ApJ...616..872R" {
		t.Errorf("Sgr A*: %+v", out[1])
	}
}

func fmtSscan(s string, x *float64) (int, error) { return fmt.Sscan(s, x) }
