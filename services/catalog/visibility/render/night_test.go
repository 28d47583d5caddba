package render

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obsops/obsops/services/catalog/visibility"
)

// node is a generic XML element (the SVG parsed back).
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []node     `xml:",any"`
}

func (n *node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *node) walk(f func(*node)) {
	f(n)
	for i := range n.Nodes {
		n.Nodes[i].walk(f)
	}
}

func (n *node) byID(id string) *node {
	var out *node
	n.walk(func(m *node) {
		if out == nil && m.attr("id") == id {
			out = m
		}
	})
	return out
}

// texts lists the text elements' contents under n.
func (n *node) texts() []string {
	var out []string
	n.walk(func(m *node) {
		if m.XMLName.Local == "text" {
			out = append(out, m.Text)
		}
	})
	return out
}

// examplePlot: submm targets over a day and a night at the site, October 2026.
func examplePlot(t testing.TB, n int) *NightPlot {
	site := visibility.DefaultSite()
	start := time.Date(2026, 10, 15, 12, 0, 0, 0, time.UTC)
	end := start.Add(24 * time.Hour)
	step := 5 * time.Minute
	all := []struct {
		name    string
		ra, dec float64
	}{{"Orion KL", 83.8105, -5.3752}, {"Sgr B2(N)", 266.8328, -28.3718}, {"IRC+10216", 146.9892, 13.2788},
		{"NGC 253", 11.8880, -25.2882}, {"Arp 220", 233.7385, 23.5032}, {"W51e2", 290.9329, 14.5097},
		{"G34.26+0.15", 283.3275, 1.2494}, {"HL Tau", 67.9102, 18.2327}, {"SDP.81", 135.7984, 0.6519}, {"Cen A", 201.3651, -43.0191}}
	p := &NightPlot{Title: "Altitude of test sources", Subtitle: "FYST · geometric altitude · Sun avoidance 45°", Start: start, End: end,
		Location: site.Location(), Sky: visibility.Sky(&site, start, end, step), MinElevationDeg: 20, MaxElevationDeg: 90}
	for i := range n {
		s := all[i%len(all)]
		src := visibility.Source{Kind: visibility.KindFixed, RADeg: s.ra, DecDeg: s.dec}
		res := visibility.Compute(&site, &src, visibility.Request{Start: start, End: end, Step: step})
		p.Sources = append(p.Sources, NightSource{Label: s.name, Result: res})
	}
	return p
}

// TestNightPlotSVG parses the SVG back: every axis is there with labels, the windows are shaded
// exactly where the engine's windows are (and nowhere else), twilight is shaded where the Sun
// is below the horizon, and the legend names every source.
func TestNightPlotSVG(t *testing.T) {
	p := examplePlot(t, 3)
	svg := NightSVG(p)
	if p := os.Getenv("OPS_WRITE_NIGHT_PLOT"); p != "" {
		if err := os.WriteFile(p, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var root node
	if err := xml.Unmarshal(svg, &root); err != nil {
		t.Fatalf("not well-formed: %v", err)
	}
	l := layoutNight(p)
	for id, want := range map[string]int{"axis-utc": 12, "axis-local": 12, "axis-lst": 12, "axis-altitude": 10, "axis-airmass": 7, "legend": 7} {
		g := root.byID(id)
		if g == nil {
			t.Fatalf("no group %s", id)
		}
		if got := len(g.texts()); got < want {
			t.Errorf("%s: %d labels, want at least %d", id, got, want)
		}
	}
	// local time is UTC−3 in October at the site (Chilean summer time, America/Santiago): the first
	// UTC tick 12:00 is 09:00 local
	if l0, u0 := root.byID("axis-local").texts()[0], root.byID("axis-utc").texts()[0]; l0 != "09:00" || u0 != "12:00" {
		t.Errorf("first ticks: local %q, UTC %q", l0, u0)
	}
	// LST at the first tick, against the IAU 1982 GMST formula (independent of SOFA's Gmst06)
	d := float64(p.Start.Unix()-946728000) / 86400
	want := math.Mod(18.697374558+24.06570982441908*d+visibility.DefaultSite().LongitudeDeg/15+48, 24)
	if got := root.byID("axis-lst").texts()[0]; got != hm(want) {
		t.Errorf("LST at 12:00 UTC: %q, want %q", got, hm(want))
	}
	for _, s := range []string{"°", "airmass", "LST", "UTC", "Moon", "twilight", "Orion KL", "Sgr B2(N)", "IRC+10216", "limit 20°"} {
		if !bytes.Contains(svg, []byte(s)) {
			t.Errorf("no %q in the plot", s)
		}
	}

	x := func(tm time.Time) float64 {
		return l.left + l.pw*tm.Sub(p.Start).Seconds()/p.End.Sub(p.Start).Seconds()
	}
	type span struct{ x0, x1 float64 }
	shaded := map[int][]span{}
	root.walk(func(n *node) {
		if n.attr("class") != "window" {
			return
		}
		i, _ := strconv.Atoi(n.attr("data-source"))
		x0, _ := strconv.ParseFloat(n.attr("x"), 64)
		w, _ := strconv.ParseFloat(n.attr("width"), 64)
		shaded[i] = append(shaded[i], span{x0, x0 + w})
	})
	for i, s := range p.Sources {
		if len(s.Result.Windows) == 0 {
			t.Fatalf("%s: the example should have windows", s.Label)
		}
		got := shaded[i]
		sort.Slice(got, func(a, b int) bool { return got[a].x0 < got[b].x0 })
		if len(got) != len(s.Result.Windows) {
			t.Fatalf("%s: %d shaded windows, %d windows", s.Label, len(got), len(s.Result.Windows))
		}
		for k, w := range s.Result.Windows {
			if math.Abs(got[k].x0-x(w.Start)) > 0.11 || math.Abs(got[k].x1-x(w.End)) > 0.2 {
				t.Errorf("%s window %d: shaded %.1f–%.1f, window at %.1f–%.1f", s.Label, k, got[k].x0, got[k].x1, x(w.Start), x(w.End))
			}
		}
		// every sample inside a shaded span is observable, every one outside is not
		for _, sm := range s.Result.Samples {
			in := false
			for _, g := range got {
				in = in || x(sm.Time) > g.x0+0.2 && x(sm.Time) < g.x1-0.2
			}
			out := true
			for _, g := range got {
				out = out && (x(sm.Time) < g.x0-0.2 || x(sm.Time) > g.x1+0.2)
			}
			if in && !sm.Observable || out && sm.Observable {
				t.Errorf("%s at %s: observable %v, shaded %v", s.Label, sm.Time.Format(time.RFC3339), sm.Observable, in)
			}
		}
	}
	// twilight: each shaded band's middle has the Sun in that band (checked with the full pipeline)
	site := visibility.DefaultSite()
	sun := visibility.Source{Kind: visibility.KindSolarSystem, Body: "sun"}
	bands := map[string][2]float64{"civil": {-6, -0.833}, "nautical": {-12, -6}, "astronomical": {-18, -12}, "night": {-90, -18}}
	seen := map[string]bool{}
	root.walk(func(n *node) {
		cls := n.attr("class")
		if !strings.HasPrefix(cls, "twilight ") {
			return
		}
		name := strings.TrimPrefix(cls, "twilight twilight-")
		a, _ := time.Parse(time.RFC3339, n.attr("data-start"))
		b, _ := time.Parse(time.RFC3339, n.attr("data-end"))
		alt, _, _ := visibility.Full(&site, &sun, a.Add(b.Sub(a)/2))
		if r := bands[name]; alt < r[0]-0.1 || alt > r[1]+0.1 {
			t.Errorf("%s shading %s–%s: the Sun is at %.2f°", name, a, b, alt)
		}
		seen[name] = true
	})
	if len(seen) != 4 {
		t.Errorf("twilight bands shaded: %v", seen)
	}
}

// TestNightPlotPNG decodes the PNG: the layout's size, mostly drawn, every glyph in the font.
func TestNightPlotPNG(t *testing.T) {
	p := examplePlot(t, 10)
	b, drawn := nightPNG(p)
	if path := os.Getenv("OPS_WRITE_NIGHT_PNG"); path != "" {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	l := layoutNight(p)
	if img.Bounds().Dx() != int(l.w) || img.Bounds().Dy() != int(l.h) {
		t.Fatalf("size %v, want %gx%g", img.Bounds(), l.w, l.h)
	}
	if f := nonWhite(img, img.Bounds()); f < 0.2 {
		t.Errorf("only %.0f%% of the image drawn", f*100)
	}
	// each source's colour appears in its curve
	for i := range p.Sources {
		if !hasColour(img, palette[i]) {
			t.Errorf("no pixel of source %d's colour", i)
		}
	}
	missing, err := MissingGlyphs(drawn)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("the font has no glyph for %q", string(missing))
	}
	if len(drawn) < 50 {
		t.Errorf("only %d labels drawn", len(drawn))
	}
}

// TestHeatmapDegreeGlyph: the heatmap PNG's title "limit 20°" draws the degree sign — the pixels
// of the title differ from a render with "°" replaced by a space — and the font has every glyph.
func TestHeatmapDegreeGlyph(t *testing.T) {
	in := HeatmapInput{Title: "Hours observable per day, 2026 (limit 20°, Sun avoidance 45°)", Year: 2026,
		Labels: []string{"Orion KL", "scan el 45° az 120–240"}, Hours: [][]float64{make([]float64, 365), make([]float64, 365)}}
	b1, drawn := heatmapPNG(in)
	in.Title = strings.ReplaceAll(in.Title, "°", " ")
	b2, _ := heatmapPNG(in)
	i1, err1 := png.Decode(bytes.NewReader(b1))
	i2, err2 := png.Decode(bytes.NewReader(b2))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	title := image.Rect(0, 0, i1.Bounds().Dx(), 24)
	diff := 0
	for y := title.Min.Y; y < title.Max.Y; y++ {
		for x := title.Min.X; x < title.Max.X; x++ {
			if i1.At(x, y) != i2.At(x, y) {
				diff++
			}
		}
	}
	if diff < 10 {
		t.Errorf("the degree signs changed %d pixels of the title", diff)
	}
	missing, err := MissingGlyphs(drawn)
	if err != nil || len(missing) > 0 {
		t.Errorf("missing glyphs %q (%v)", string(missing), err)
	}
	// the colour scale has its ticks and unit
	for _, s := range []string{"0 h", "12 h", "24 h", "hours/day"} {
		found := false
		for _, d := range drawn {
			found = found || d == s
		}
		if !found {
			t.Errorf("colour scale: no %q", s)
		}
	}
}

// TestSkyAgainstFull: the Sun's and the Moon's altitudes of Sky agree with the full SOFA
// pipeline, and the Moon separation helper with a direct computation.
func TestSkyAgainstFull(t *testing.T) {
	site := visibility.DefaultSite()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	sky := visibility.Sky(&site, start, start.Add(30*time.Hour), 17*time.Minute)
	sun := visibility.Source{Kind: visibility.KindSolarSystem, Body: "sun"}
	moon := visibility.Source{Kind: visibility.KindSolarSystem, Body: "moon"}
	for _, s := range sky {
		sa, _, _ := visibility.Full(&site, &sun, s.Time)
		ma, maz, _ := visibility.Full(&site, &moon, s.Time)
		if math.Abs(sa-s.SunAltDeg) > 0.001 || math.Abs(ma-s.MoonAltDeg) > 0.001 || math.Abs(maz-s.MoonAzDeg) > 0.01 {
			t.Fatalf("%s: Sun %.4f/%.4f Moon %.4f/%.4f", s.Time, s.SunAltDeg, sa, s.MoonAltDeg, ma)
		}
	}
	if d := visibility.SeparationAltAzDeg(30, 10, 30, 190); math.Abs(d-120) > 1e-9 {
		t.Errorf("separation %.6f, want 120", d)
	}
}

func nonWhite(img image.Image, r image.Rectangle) float64 {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if cr < 0xf000 || cg < 0xf000 || cb < 0xf000 {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

func hasColour(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) bool {
	wr, wg, wb, _ := c.RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			if r == wr && g == wg && bb == wb {
				return true
			}
		}
	}
	return false
}

// TestBenchNightPlot (OPS_BENCH=1, `make bench`): a night's plot with 10 sources — computing the
// curves, windows, Sun, Moon and LST, and drawing SVG and PNG — p99 ≤ 100 ms.
func TestBenchNightPlot(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	run := func(draw func(*NightPlot) []byte) (p50, p99 time.Duration) {
		var lat []time.Duration
		for i := range 60 {
			t0 := time.Now()
			p := examplePlot(t, 10)
			_ = draw(p)
			if i >= 5 {
				lat = append(lat, time.Since(t0))
			}
		}
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		return lat[len(lat)/2], lat[int(math.Ceil(0.99*float64(len(lat))))-1]
	}
	for _, c := range []struct {
		name string
		draw func(*NightPlot) []byte
	}{{"svg", NightSVG}, {"png", NightPNG}} {
		p50, p99 := run(c.draw)
		verdict := "PASS"
		if p99 > 100*time.Millisecond {
			verdict = "FAIL"
		}
		t.Logf("night plot, 10 sources, 24 h at 5 min, computed and drawn as %s: p50 %s p99 %s | p99 <= 100 ms: %s",
			c.name, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), verdict)
		if verdict == "FAIL" {
			t.Error(fmt.Sprintf("%s p99 %s", c.name, p99))
		}
	}
}
