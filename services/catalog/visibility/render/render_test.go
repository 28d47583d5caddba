package render

import (
	"bytes"
	"context"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"testing"
	"time"

	"github.com/obsops/obsops/services/catalog/visibility"
)

func checkXML(t *testing.T, b []byte) int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	n := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if _, ok := tok.(xml.StartElement); ok {
			n++
		}
	}
}

// TestPlot renders a day of Sirius from the site (written to OPS_WRITE_PLOT when set: that is
// how docs/visibility-plot.svg is made).
func TestPlot(t *testing.T) {
	site := visibility.DefaultSite()
	src := visibility.Source{Kind: visibility.KindFixed, RADeg: 101.28715533, DecDeg: -16.71611586}
	start := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC)
	end := start.Add(48 * time.Hour)
	res := visibility.Compute(&site, &src, visibility.Request{Start: start, End: end, Step: 5 * time.Minute})
	svg := Plot(PlotInput{Title: "Sirius (source 1) from FYST", Subtitle: "2026-06-11 00:00 – 2026-06-13 00:00 UTC · limit 20° · Sun avoidance 45° (entered 11 June 23:34)", Result: res, Start: start, End: end})
	if n := checkXML(t, svg); n < 30 {
		t.Fatalf("only %d elements", n)
	}
	if len(res.Windows) == 0 || len(res.SunAvoidance) == 0 {
		t.Fatalf("the example should show windows and Sun avoidance: %+v %+v", res.Windows, res.SunAvoidance)
	}
	if p := os.Getenv("OPS_WRITE_PLOT"); p != "" {
		if err := os.WriteFile(p, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHeatmapImages(t *testing.T) {
	site := visibility.DefaultSite()
	srcs := []visibility.Source{{Kind: visibility.KindFixed, RADeg: 83.63, DecDeg: 22.01}, {Kind: visibility.KindFixed, RADeg: 266.42, DecDeg: -29.01},
		{Kind: visibility.KindFixed, RADeg: 83.82, DecDeg: -5.39}, {Kind: visibility.KindFixed, RADeg: 80.89, DecDeg: -69.76},
		{Kind: visibility.KindFixed, RADeg: 10.68, DecDeg: 41.27}, {Kind: visibility.KindFixed, RADeg: 201.37, DecDeg: -43.02},
		{Kind: visibility.KindSolarSystem, Body: "moon"}, {Kind: visibility.KindSolarSystem, Body: "jupiter"},
		{Kind: visibility.KindConstantElevation, ElevationDeg: 45, AzMinDeg: 120, AzMaxDeg: 240}}
	hours, err := visibility.NewYear(&site, 2026).Hours(context.Background(), srcs, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := HeatmapInput{Title: "Hours observable per day from FYST, 2026 (limit 20°, Sun avoidance 45°)", Year: 2026,
		Labels: []string{"Crab <M1>", "Sgr A*", "Orion Nebula", "30 Doradus", "M31", "Centaurus A", "Moon", "Jupiter", "scan el 45° az 120–240"}, Hours: hours}
	svg := HeatmapSVG(in)
	if n := checkXML(t, svg); n < 100 {
		t.Fatalf("only %d elements", n)
	}
	if p := os.Getenv("OPS_WRITE_HEATMAP"); p != "" {
		if err := os.WriteFile(p, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := png.Decode(bytes.NewReader(HeatmapPNG(in)))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() < 365*2 || img.Bounds().Dy() < 3*14 {
		t.Fatalf("image %v", img.Bounds())
	}
	// cells carry the colour scale: 0 h and 24 h differ
	if colour(0) == colour(24) {
		t.Fatal("flat colour scale")
	}
}
