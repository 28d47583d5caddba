package resolve_test

import (
	"math"
	"testing"

	"github.com/obsops/obsops/services/catalog/resolve"
)

func TestNormalisationTable(t *testing.T) {
	l, err := resolve.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() < 18000 {
		t.Fatalf("catalogue has %d objects, want the 5044 stars to mag 6 and OpenNGC's ~13,000 objects", l.Len())
	}
	for _, c := range []struct {
		input, name string
		ra, dec     float64
	}{
		// The names of the issue.
		{"M 31", "M31", 10.6848, 41.2691},
		{"m31", "M31", 10.6848, 41.2691},
		{"NGC 224", "M31", 10.6848, 41.2691},
		{"Andromeda Galaxy", "M31", 10.6848, 41.2691},
		{"alf Lyr", "Vega", 279.2347, 38.7837},
		{"alpha Lyrae", "Vega", 279.2347, 38.7837},
		{"Vega", "Vega", 279.2347, 38.7837},
		{"HIP 91262", "Vega", 279.2347, 38.7837},
		{"HD 172167", "Vega", 279.2347, 38.7837},
		// And more spellings.
		{"  vega ", "Vega", 279.2347, 38.7837},
		{"VEGA", "Vega", 279.2347, 38.7837},
		{"α Lyr", "Vega", 279.2347, 38.7837},
		{"* alf Lyr", "Vega", 279.2347, 38.7837},
		{"3 Lyr", "Vega", 279.2347, 38.7837},
		{"3 Lyrae", "Vega", 279.2347, 38.7837},
		{"HD172167", "Vega", 279.2347, 38.7837},
		{"hip91262", "Vega", 279.2347, 38.7837},
		{"GJ 721", "Vega", 279.2347, 38.7837},
		{"Messier 31", "M31", 10.6848, 41.2691},
		{"NGC0224", "M31", 10.6848, 41.2691},
		{"andromeda galaxy", "M31", 10.6848, 41.2691},
		{"M42", "M42", 83.8187, -5.3897}, // OpenNGC: at the Trapezium (theta1 Ori C)
		{"Orion Nebula", "M42", 83.8187, -5.3897},
		{"NGC 1976", "M42", 83.8187, -5.3897},
		{"M83", "M83", 204.2540, -29.8654},
		{"ngc253", "NGC 253", 11.8880, -25.2882},
		{"NGC 253", "NGC 253", 11.8880, -25.2882},
		{"NGC0253", "NGC 253", 11.8880, -25.2882},
		{"Sculptor Galaxy", "NGC 253", 11.8880, -25.2882},
		{"PGC 2789", "NGC 253", 11.8880, -25.2882},
		{"Mel 22", "M45", 0, 0},
		{"M102", "M101", 0, 0},
		{"Antennae", "NGC 4038", 0, 0},
		{"Arp 220", "Arp 220", 233.7385, 23.5032},
		{"Mrk 231", "Mrk 231", 0, 0},
		{"Markarian 231", "Mrk 231", 0, 0},
		{"Orion KL", "Orion KL", 0, 0},
		{"IRC+10216", "IRC+10216", 0, 0},
		{"IRC +10216", "IRC+10216", 0, 0},
		{"sgrb2(n)", "Sgr B2(N)", 0, 0},
		{"Betelgeuse", "Betelgeuse", 88.7929, 7.4071},
		{"alpha Orionis", "Betelgeuse", 88.7929, 7.4071},
		{"58 Ori", "Betelgeuse", 88.7929, 7.4071},
		{"Sirius", "Sirius", 101.2872, -16.7161},
		{"alpha Canis Majoris", "Sirius", 101.2872, -16.7161},
		{"alf CMa", "Sirius", 101.2872, -16.7161},
		{"mu Cep", "", 0, 0},
		{"theta1 Ori", "", 0, 0},
		{"M 1", "M1", 0, 0},
		{"Crab Nebula", "M1", 0, 0},
		{"NGC 5195", "NGC 5195", 0, 0}, // the companion, its own object in OpenNGC,
		{"Whirlpool", "M51", 0, 0},
		{"Pleiades", "M45", 0, 0},
		{"Bode's Galaxy", "M81", 0, 0},
	} {
		o, ok := l.Lookup(c.input)
		if !ok {
			t.Errorf("%q: not found", c.input)
			continue
		}
		if c.name != "" && o.Name != c.name {
			t.Errorf("%q: %q, want %q", c.input, o.Name, c.name)
		}
		if c.ra != 0 && (math.Abs(o.RADeg-c.ra) > 1e-3 || math.Abs(o.DecDeg-c.dec) > 1e-3) {
			t.Errorf("%q: %.4f %.4f, want %.4f %.4f", c.input, o.RADeg, o.DecDeg, c.ra, c.dec)
		}
	}
	for _, miss := range []string{"", "M 111", "NGC 99999", "Orion KLX", "alpha", "Lyrae", "foo Lyr", "HD 0"} {
		if o, ok := l.Lookup(miss); ok {
			t.Errorf("%q: found %q, want not found", miss, o.Name)
		}
	}
}

func TestParseCoordinates(t *testing.T) {
	for _, c := range []struct {
		in      string
		ra, dec float64
		ok, bad bool
	}{
		{"18h36m56.3s +38d47m01s", 279.234583, 38.783611, true, false},
		{"279.234 38.784", 279.234, 38.784, true, false},
		{"279.234, -38.784", 279.234, -38.784, true, false},
		{"18:36:56.3 +38:47:01", 279.234583, 38.783611, true, false},
		{"05 35 14.1 -05 22 30", 83.80875, -5.375, true, false},
		{"05h35m14.1s -05°22'30\"", 83.80875, -5.375, true, false},
		{"360 0", 0, 0, true, true},
		{"10 95", 0, 0, true, true},
		{"24h00m00s +00d00m00s", 0, 0, true, true},
		{"Vega", 0, 0, false, false},
		{"M 31", 0, 0, false, false},
	} {
		ra, dec, ok, err := resolve.ParseCoordinates(c.in)
		if ok != c.ok || (err != nil) != c.bad {
			t.Errorf("%q: ok %v err %v", c.in, ok, err)
			continue
		}
		if ok && !c.bad && (math.Abs(ra-c.ra) > 1e-5 || math.Abs(dec-c.dec) > 1e-5) {
			t.Errorf("%q: %.6f %.6f, want %.6f %.6f", c.in, ra, dec, c.ra, c.dec)
		}
	}
	if got := resolve.FormatRA(83.80875); got != "05h35m14.10s" {
		t.Errorf("FormatRA %q", got)
	}
	if got := resolve.FormatDec(-5.375); got != "-05d22m30.0s" {
		t.Errorf("FormatDec %q", got)
	}
	if got := resolve.FormatRA(359.99999999); got != "00h00m00.00s" {
		t.Errorf("FormatRA wraps: %q", got)
	}
	if got := resolve.FormatDec(38.7836111); got != "+38d47m01.0s" {
		t.Errorf("FormatDec %q", got)
	}
}
