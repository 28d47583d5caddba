package render

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"

	"github.com/obsops/obsops/services/catalog/visibility"
)

// NightSource is one source of a night plot: its visibility over the plot's range (samples
// on the same grid as the plot's Sky) and the label of its legend entry.
type NightSource struct {
	Label  string
	Result *visibility.Result
}

// NightPlot is what an altitude plot shows: one or more sources against UTC, with local time
// and LST axes, airmass, twilight shading, the Moon, the elevation limits, each source's
// windows and Sun-avoidance periods, and a legend.
type NightPlot struct {
	Title    string
	Subtitle string
	Start    time.Time
	End      time.Time
	// Location is the site's time zone (the local-time axis).
	Location *time.Location
	// Sky holds the Sun, the Moon and the LST on the samples' grid (visibility.Sky).
	Sky             []visibility.SkySample
	Sources         []NightSource
	MinElevationDeg float64
	MaxElevationDeg float64
}

// palette: distinguishable line colours (Tableau 10).
var palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
	{255, 127, 14, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {23, 190, 207, 255}, {188, 189, 34, 255}, {127, 127, 127, 255}}

var (
	limitColour  = color.RGBA{192, 57, 43, 255}
	moonColour   = color.RGBA{90, 90, 90, 255}
	sunColour    = color.RGBA{245, 166, 35, 255}
	gridColour   = color.RGBA{225, 225, 225, 255}
	axisColour   = color.RGBA{51, 51, 51, 255}
	textColour   = color.RGBA{17, 17, 17, 255}
	mutedColour  = color.RGBA{85, 85, 85, 255}
	twilightFill = [4]color.RGBA{{236, 241, 248, 255}, {214, 224, 238, 255}, {190, 205, 226, 255}, {168, 186, 214, 255}}
	// twilightNames are the classes and legend labels of the shading, lightest first.
	twilightNames = [4]string{"civil", "nautical", "astronomical", "night"}
)

// AirmassTicks are the airmass values labelled on the right axis (sec z).
var AirmassTicks = []float64{1.0, 1.1, 1.2, 1.3, 1.5, 2, 3}

// canvas is what both outputs (SVG, PNG) draw on.
type canvas interface {
	rect(x, y, w, h float64, fill color.RGBA, opacity float64, attrs string)
	line(x1, y1, x2, y2 float64, stroke color.RGBA, width float64, dash bool)
	polyline(pts [][2]float64, stroke color.RGBA, width float64, dash bool, attrs string)
	// text draws s with its baseline at y; anchor: 0 start, 1 middle, 2 end.
	text(x, y float64, s string, size float64, bold bool, anchor int, c color.RGBA)
	group(id string) // starts a named group (SVG) until the next group or end
	clip(x, y, w, h float64)
	unclip()
}

type nightLayout struct {
	w, h, left, right, top, ph, pw float64
	stripTop, stripH, legendTop    float64
}

const (
	stripRow   = 13.0 // height of one source's row of windows
	legendRow  = 18.0
	legendCols = 2
)

func layoutNight(p *NightPlot) nightLayout {
	l := nightLayout{w: 1000, left: 104, right: 64, top: 104, ph: 320}
	l.pw = l.w - l.left - l.right
	l.stripTop = l.top + l.ph + 40
	l.stripH = stripRow * float64(len(p.Sources))
	l.legendTop = l.stripTop + l.stripH + 22
	entries := len(p.Sources) + 4 // + Moon, limits, windows/Sun avoidance, twilight
	l.h = l.legendTop + legendRow*math.Ceil(float64(entries)/legendCols) + 16
	return l
}

// drawNight draws the plot on c (shared by NightSVG and NightPNG).
func drawNight(c canvas, p *NightPlot) {
	l := layoutNight(p)
	t0, t1 := p.Start, p.End
	span := t1.Sub(t0).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return l.left + l.pw*math.Max(0, math.Min(1, t.Sub(t0).Seconds()/span)) }
	y := func(alt float64) float64 { return l.top + l.ph*(90-alt)/90 }
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}

	c.rect(0, 0, l.w, l.h, color.RGBA{255, 255, 255, 255}, 1, "")
	c.text(l.left, 22, p.Title, 15, true, 0, textColour)
	c.text(l.left, 40, p.Subtitle, 12, false, 0, mutedColour)

	// twilight shading from the Sun's altitude on the sky grid
	c.group("twilight")
	level := func(sunAlt float64) int {
		switch {
		case sunAlt >= visibility.SunsetAltDeg:
			return -1
		case sunAlt >= visibility.CivilTwilightDeg:
			return 0
		case sunAlt >= visibility.NauticalTwilightDeg:
			return 1
		case sunAlt >= visibility.AstroTwilightDeg:
			return 2
		default:
			return 3
		}
	}
	for i := 0; i < len(p.Sky); {
		lv := level(p.Sky[i].SunAltDeg)
		j := i + 1
		for j < len(p.Sky) && level(p.Sky[j].SunAltDeg) == lv {
			j++
		}
		if lv >= 0 {
			a := mid(p.Sky, i, true)
			b := mid(p.Sky, j, false)
			c.rect(x(a), l.top, x(b)-x(a), l.ph, twilightFill[lv], 1,
				fmt.Sprintf(`class="twilight twilight-%s" data-start="%s" data-end="%s"`, twilightNames[lv], a.Format(time.RFC3339), b.Format(time.RFC3339)))
		}
		i = j
	}
	// a single source's windows also shade the altitude area
	if len(p.Sources) == 1 {
		c.group("windows-area")
		for _, w := range p.Sources[0].Result.Windows {
			c.rect(x(w.Start), l.top, x(w.End)-x(w.Start), l.ph, color.RGBA{46, 158, 68, 255}, 0.18,
				fmt.Sprintf(`class="window-area" data-start="%s" data-end="%s"`, w.Start.Format(time.RFC3339), w.End.Format(time.RFC3339)))
		}
	}

	// altitude axis (left) and grid
	c.group("axis-altitude")
	for a := 0.0; a <= 90; a += 10 {
		col := gridColour
		if a == 0 {
			col = axisColour
		}
		c.line(l.left, y(a), l.left+l.pw, y(a), col, 1, false)
		c.text(l.left-6, y(a)+4, fmt.Sprintf("%g°", a), 11, false, 2, textColour)
	}
	c.text(l.left-6, l.top-44, "altitude", 11, true, 2, textColour)
	// airmass axis (right)
	c.group("axis-airmass")
	for _, am := range AirmassTicks {
		alt := math.Asin(1/am) * 180 / math.Pi
		c.line(l.left+l.pw, y(alt), l.left+l.pw+5, y(alt), axisColour, 1, false)
		c.text(l.left+l.pw+8, y(alt)+4, fmt.Sprintf("%.1f", am), 11, false, 0, textColour)
	}
	c.text(l.left+l.pw+8, l.top-44, "airmass", 11, true, 0, textColour)

	// time axes: UTC below, local time and LST above, at the same instants
	tick := nightTick(t1.Sub(t0))
	first := t0.Truncate(tick)
	if first.Before(t0) {
		first = first.Add(tick)
	}
	c.group("axis-utc")
	for t := first; !t.After(t1); t = t.Add(tick) {
		c.line(x(t), l.top, x(t), l.top+l.ph, gridColour, 1, false)
		c.line(x(t), l.top+l.ph, x(t), l.top+l.ph+5, axisColour, 1, false)
		c.text(x(t), l.top+l.ph+18, t.UTC().Format("15:04"), 11, false, 1, textColour)
	}
	c.text(l.left-26, l.top+l.ph+18, "UTC", 11, true, 2, textColour)
	c.text(l.left+l.pw, l.top+l.ph+34, fmt.Sprintf("%s – %s UTC", t0.UTC().Format("2006-01-02 15:04"), t1.UTC().Format("2006-01-02 15:04")), 11, false, 2, mutedColour)
	c.group("axis-local")
	for t := first; !t.After(t1); t = t.Add(tick) {
		c.line(x(t), l.top-5, x(t), l.top, axisColour, 1, false)
		c.text(x(t), l.top-9, t.In(loc).Format("15:04"), 11, false, 1, textColour)
	}
	_, off := t0.In(loc).Zone()
	zone := fmt.Sprintf("UTC%+d", off/3600)
	if off%3600 != 0 {
		zone = fmt.Sprintf("UTC%+.1f", float64(off)/3600)
	}
	c.text(l.left-26, l.top-9, "local "+zone, 11, true, 2, textColour)
	c.group("axis-lst")
	for t := first; !t.After(t1); t = t.Add(tick) {
		c.text(x(t), l.top-25, hm(lstAt(p.Sky, t)), 11, false, 1, mutedColour)
	}
	c.text(l.left-26, l.top-25, "LST", 11, true, 2, textColour)

	// limits
	c.group("limits")
	c.line(l.left, y(p.MinElevationDeg), l.left+l.pw, y(p.MinElevationDeg), limitColour, 1.2, true)
	c.text(l.left+4, y(p.MinElevationDeg)-4, fmt.Sprintf("limit %g° (airmass %.2f)", p.MinElevationDeg, 1/math.Sin(p.MinElevationDeg*math.Pi/180)), 11, false, 0, limitColour)
	if p.MaxElevationDeg < 90 {
		c.line(l.left, y(p.MaxElevationDeg), l.left+l.pw, y(p.MaxElevationDeg), limitColour, 1.2, true)
		c.text(l.left+4, y(p.MaxElevationDeg)+13, fmt.Sprintf("upper limit %g°", p.MaxElevationDeg), 11, false, 0, limitColour)
	}

	// curves, clipped to the plot area: the Moon, then the sources
	c.clip(l.left, l.top, l.pw, l.ph)
	c.group("moon")
	moon := make([][2]float64, 0, len(p.Sky))
	for _, s := range p.Sky {
		moon = append(moon, [2]float64{x(s.Time), y(s.MoonAltDeg)})
	}
	c.polyline(moon, moonColour, 1.3, true, `class="moon"`)
	c.group("sources")
	for i, s := range p.Sources {
		pts := make([][2]float64, 0, len(s.Result.Samples))
		for _, sm := range s.Result.Samples {
			pts = append(pts, [2]float64{x(sm.Time), y(sm.AltDeg)})
		}
		c.polyline(pts, palette[i%len(palette)], 2, false, fmt.Sprintf(`class="source" data-source="%d"`, i))
	}
	c.unclip()
	c.group("frame")
	c.rect(l.left, l.top, l.pw, l.ph, color.RGBA{}, 0, `fill="none" stroke="#333"`)
	c.line(l.left, l.top, l.left+l.pw, l.top, axisColour, 1, false)
	c.line(l.left, l.top+l.ph, l.left+l.pw, l.top+l.ph, axisColour, 1, false)
	c.line(l.left, l.top, l.left, l.top+l.ph, axisColour, 1, false)
	c.line(l.left+l.pw, l.top, l.left+l.pw, l.top+l.ph, axisColour, 1, false)

	// one row per source below the plot: its windows (its colour) and Sun avoidance (orange)
	c.group("windows")
	for i, s := range p.Sources {
		ry := l.stripTop + float64(i)*stripRow
		c.rect(l.left, ry, l.pw, stripRow-3, color.RGBA{245, 245, 245, 255}, 1, "")
		for _, iv := range s.Result.SunAvoidance {
			c.rect(x(iv.Start), ry, x(iv.End)-x(iv.Start), stripRow-3, sunColour, 0.55,
				fmt.Sprintf(`class="sun-avoidance" data-source="%d" data-start="%s" data-end="%s"`, i, iv.Start.Format(time.RFC3339), iv.End.Format(time.RFC3339)))
		}
		for _, w := range s.Result.Windows {
			c.rect(x(w.Start), ry, x(w.End)-x(w.Start), stripRow-3, palette[i%len(palette)], 0.85,
				fmt.Sprintf(`class="window" data-source="%d" data-start="%s" data-end="%s" data-reasons="%s %s"`, i, w.Start.Format(time.RFC3339), w.End.Format(time.RFC3339), w.StartReason, w.EndReason))
		}
		c.text(l.left-6, ry+stripRow-4, shorten(s.Label, 16), 10, false, 2, textColour)
	}
	c.text(l.left, l.stripTop-6, "observable windows (within the limits, outside Sun avoidance)", 10, false, 0, mutedColour)

	// legend
	c.group("legend")
	colW := l.pw / legendCols
	k := 0
	pos := func() (float64, float64) {
		px, py := l.left+float64(k%legendCols)*colW, l.legendTop+float64(k/legendCols)*legendRow
		k++
		return px, py
	}
	for i, s := range p.Sources {
		px, py := pos()
		c.line(px, py-4, px+24, py-4, palette[i%len(palette)], 2.5, false)
		c.text(px+30, py, shorten(s.Label, 30)+moonSepText(p, &s), 11, false, 0, textColour)
	}
	px, py := pos()
	c.line(px, py-4, px+24, py-4, moonColour, 1.3, true)
	c.text(px+30, py, "Moon altitude", 11, false, 0, textColour)
	px, py = pos()
	c.line(px, py-4, px+24, py-4, limitColour, 1.2, true)
	c.text(px+30, py, "elevation limit", 11, false, 0, textColour)
	px, py = pos()
	c.rect(px, py-10, 11, 10, palette[0], 0.85, "")
	c.rect(px+13, py-10, 11, 10, sunColour, 0.55, "")
	c.text(px+30, py, "window · Sun avoidance", 11, false, 0, textColour)
	px, py = pos()
	for i := range twilightFill {
		c.rect(px+float64(i)*7, py-10, 7, 10, twilightFill[i], 1, "")
	}
	c.text(px+34, py, "twilight: civil, nautical, astronomical, night", 11, false, 0, textColour)
}

// mid: the boundary between sample i-1 and i (the middle), clamped to the ends.
func mid(sky []visibility.SkySample, i int, start bool) time.Time {
	switch {
	case i <= 0:
		return sky[0].Time
	case i >= len(sky):
		return sky[len(sky)-1].Time
	}
	a, b := sky[i-1].Time, sky[i].Time
	_ = start
	return a.Add(b.Sub(a) / 2)
}

// lstAt interpolates the LST (hours) at t from the sky grid (wrapping at 24 h).
func lstAt(sky []visibility.SkySample, t time.Time) float64 {
	if len(sky) == 0 {
		return 0
	}
	for i := 1; i < len(sky); i++ {
		if !sky[i].Time.Before(t) {
			a, b := sky[i-1], sky[i]
			f := t.Sub(a.Time).Seconds() / b.Time.Sub(a.Time).Seconds()
			d := b.LSTHours - a.LSTHours
			if d < 0 {
				d += 24
			}
			return math.Mod(a.LSTHours+f*d, 24)
		}
	}
	return sky[len(sky)-1].LSTHours
}

func hm(h float64) string {
	m := int(math.Round(h*60)) % (24 * 60)
	return fmt.Sprintf("%02d:%02d", m/60, m%60)
}

// moonSepText is the range of the Moon's distance from the source over the plot, for its legend.
func moonSepText(p *NightPlot, s *NightSource) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, sm := range s.Result.Samples {
		if i >= len(p.Sky) {
			break
		}
		d := visibility.SeparationAltAzDeg(sm.AltDeg, sm.AzDeg, p.Sky[i].MoonAltDeg, p.Sky[i].MoonAzDeg)
		lo, hi = math.Min(lo, d), math.Max(hi, d)
	}
	if math.IsInf(lo, 0) {
		return ""
	}
	return fmt.Sprintf("  (Moon %.0f°–%.0f° away)", lo, hi)
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func nightTick(d time.Duration) time.Duration {
	switch {
	case d <= 12*time.Hour:
		return time.Hour
	case d <= 30*time.Hour:
		return 2 * time.Hour
	case d <= 72*time.Hour:
		return 6 * time.Hour
	default:
		return 24 * time.Hour
	}
}

// ---- SVG ----

type svgCanvas struct {
	b      strings.Builder
	open   bool
	clipID int
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (s *svgCanvas) rect(x, y, w, h float64, fill color.RGBA, opacity float64, attrs string) {
	if strings.Contains(attrs, "fill=") {
		fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" %s/>`+"\n", x, y, w, h, attrs)
		return
	}
	op := ""
	if opacity < 1 {
		op = fmt.Sprintf(` fill-opacity="%.2f"`, opacity)
	}
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s %s/>`+"\n", x, y, w, h, hex(fill), op, attrs)
}

func (s *svgCanvas) line(x1, y1, x2, y2 float64, stroke color.RGBA, width float64, dash bool) {
	d := ""
	if dash {
		d = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"%s/>`+"\n", x1, y1, x2, y2, hex(stroke), width, d)
}

func (s *svgCanvas) polyline(pts [][2]float64, stroke color.RGBA, width float64, dash bool, attrs string) {
	d := ""
	if dash {
		d = ` stroke-dasharray="5 4"`
	}
	fmt.Fprintf(&s.b, `<polyline fill="none" stroke="%s" stroke-width="%g"%s %s points="`, hex(stroke), width, d, attrs)
	for i, p := range pts {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		fmt.Fprintf(&s.b, "%.1f,%.1f", p[0], p[1])
	}
	s.b.WriteString(`"/>` + "\n")
}

func (s *svgCanvas) text(x, y float64, str string, size float64, bold bool, anchor int, c color.RGBA) {
	a := [3]string{"start", "middle", "end"}[anchor]
	w := ""
	if bold {
		w = ` font-weight="bold"`
	}
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" font-size="%g"%s text-anchor="%s" fill="%s">%s</text>`+"\n", x, y, size, w, a, hex(c), esc(str))
}

func (s *svgCanvas) group(id string) {
	if s.open {
		s.b.WriteString("</g>\n")
	}
	fmt.Fprintf(&s.b, `<g id="%s">`+"\n", id)
	s.open = true
}

func (s *svgCanvas) clip(x, y, w, h float64) {
	s.clipID++
	fmt.Fprintf(&s.b, `<clipPath id="plot-area-%d"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></clipPath>`+"\n", s.clipID, x, y, w, h)
	if s.open {
		s.b.WriteString("</g>\n")
		s.open = false
	}
	fmt.Fprintf(&s.b, `<g clip-path="url(#plot-area-%d)">`+"\n", s.clipID)
}

func (s *svgCanvas) unclip() {
	if s.open {
		s.b.WriteString("</g>\n")
		s.open = false
	}
	s.b.WriteString("</g>\n")
}

// NightSVG draws the altitude plot as SVG. The text uses DejaVu Sans or the Go fonts where the
// viewer has them (both have every glyph drawn: °, –, ·, …), then the viewer's sans-serif.
func NightSVG(p *NightPlot) []byte {
	l := layoutNight(p)
	s := &svgCanvas{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="'DejaVu Sans','Go',Helvetica,Arial,sans-serif">`+"\n", l.w, l.h, l.w, l.h)
	drawNight(s, p)
	if s.open {
		s.b.WriteString("</g>\n")
	}
	s.b.WriteString("</svg>\n")
	return []byte(s.b.String())
}

// ---- PNG ----

// fonts are the Go fonts (regular, bold): parsed once, safe for concurrent use; faces are made
// per image (a face is not).
var fonts = sync.OnceValues(func() ([2]*opentype.Font, error) {
	r, err := opentype.Parse(goregular.TTF)
	if err != nil {
		return [2]*opentype.Font{}, err
	}
	b, err := opentype.Parse(gobold.TTF)
	return [2]*opentype.Font{r, b}, err
})

type pngCanvas struct {
	img   *image.RGBA
	faces map[[2]int]font.Face // (size, bold) → face
	ras   vector.Rasterizer
	clipR image.Rectangle
	// drawn records every string drawn (tests check the font has each glyph).
	drawn []string
}

func newPNGCanvas(w, h int) *pngCanvas {
	return &pngCanvas{img: image.NewRGBA(image.Rect(0, 0, w, h)), faces: map[[2]int]font.Face{}, clipR: image.Rect(0, 0, w, h)}
}

func blend(dst, c color.RGBA, a float64) color.RGBA {
	m := func(d, s uint8) uint8 { return uint8(math.Round(float64(d)*(1-a) + float64(s)*a)) }
	return color.RGBA{m(dst.R, c.R), m(dst.G, c.G), m(dst.B, c.B), 255}
}

func (p *pngCanvas) rect(x, y, w, h float64, fill color.RGBA, opacity float64, attrs string) {
	if strings.Contains(attrs, "fill=") || opacity == 0 {
		return // outline-only rect: the frame lines are drawn separately
	}
	r := image.Rect(int(math.Round(x)), int(math.Round(y)), int(math.Round(x+w)), int(math.Round(y+h))).Intersect(p.clipR)
	if opacity >= 1 {
		draw.Draw(p.img, r, image.NewUniform(fill), image.Point{}, draw.Src)
		return
	}
	for yy := r.Min.Y; yy < r.Max.Y; yy++ {
		for xx := r.Min.X; xx < r.Max.X; xx++ {
			i := p.img.PixOffset(xx, yy)
			d := color.RGBA{p.img.Pix[i], p.img.Pix[i+1], p.img.Pix[i+2], 255}
			b := blend(d, fill, opacity)
			p.img.Pix[i], p.img.Pix[i+1], p.img.Pix[i+2] = b.R, b.G, b.B
		}
	}
}

// line draws axis-aligned lines (all the grid, ticks and limits) as pixel rectangles; others as a
// polyline.
func (p *pngCanvas) line(x1, y1, x2, y2 float64, stroke color.RGBA, width float64, dash bool) {
	if x1 != x2 && y1 != y2 {
		p.polyline([][2]float64{{x1, y1}, {x2, y2}}, stroke, width, dash, "")
		return
	}
	w := math.Max(1, math.Round(width))
	if x1 > x2 {
		x1, x2 = x2, x1
	}
	if y1 > y2 {
		y1, y2 = y2, y1
	}
	seg := func(a, b float64) {
		var r image.Rectangle
		if y1 == y2 {
			r = image.Rect(int(math.Round(a)), int(math.Round(y1-w/2)), int(math.Round(b)), int(math.Round(y1-w/2))+int(w))
		} else {
			r = image.Rect(int(math.Round(x1-w/2)), int(math.Round(a)), int(math.Round(x1-w/2))+int(w), int(math.Round(b)))
		}
		draw.Draw(p.img, r.Intersect(p.clipR), image.NewUniform(stroke), image.Point{}, draw.Src)
	}
	a, b := x1, x2
	if x1 == x2 {
		a, b = y1, y2
	}
	if b-a < 1 {
		b = a + 1
	}
	if !dash {
		seg(a, b)
		return
	}
	for s := a; s < b; s += 10 {
		seg(s, math.Min(s+6, b))
	}
}

// polyline strokes the segments as quads, in chunks of a few segments, each rasterized over its
// own small bounding box (rasterizing costs the box's area).
func (p *pngCanvas) polyline(pts [][2]float64, stroke color.RGBA, width float64, dash bool, _ string) {
	const chunk = 8
	for i := 0; i+1 < len(pts); i += chunk {
		p.strokeChunk(pts[i:min(i+chunk+1, len(pts))], stroke, width, dash)
	}
}

func (p *pngCanvas) strokeChunk(pts [][2]float64, stroke color.RGBA, width float64, dash bool) {
	if len(pts) < 2 {
		return
	}
	// rasterize over the points' bounding box (within the clip), not the whole image
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, q := range pts {
		minX, minY = math.Min(minX, q[0]), math.Min(minY, q[1])
		maxX, maxY = math.Max(maxX, q[0]), math.Max(maxY, q[1])
	}
	pad := width + 2
	r := image.Rect(int(minX-pad), int(minY-pad), int(maxX+pad)+1, int(maxY+pad)+1).Intersect(p.clipR)
	if r.Empty() {
		return
	}
	p.ras.Reset(r.Dx(), r.Dy())
	ox, oy := float32(r.Min.X), float32(r.Min.Y)
	hw := width / 2
	on, run := true, 0.0
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		dx, dy := b[0]-a[0], b[1]-a[1]
		n := math.Hypot(dx, dy)
		if n == 0 {
			continue
		}
		if dash {
			run += n
			if run > 5 {
				on, run = !on, 0
			}
			if !on {
				continue
			}
		}
		px, py := -dy/n*hw, dx/n*hw
		// extend each segment by half the width so consecutive segments join without gaps
		ex, ey := dx/n*hw, dy/n*hw
		p.ras.MoveTo(float32(a[0]+px-ex)-ox, float32(a[1]+py-ey)-oy)
		p.ras.LineTo(float32(b[0]+px+ex)-ox, float32(b[1]+py+ey)-oy)
		p.ras.LineTo(float32(b[0]-px+ex)-ox, float32(b[1]-py+ey)-oy)
		p.ras.LineTo(float32(a[0]-px-ex)-ox, float32(a[1]-py-ey)-oy)
		p.ras.ClosePath()
	}
	p.ras.DrawOp = draw.Over
	p.ras.Draw(p.img, r, image.NewUniform(stroke), image.Point{})
}

func (p *pngCanvas) face(size float64, bold bool) font.Face {
	k := [2]int{int(size * 10), 0}
	if bold {
		k[1] = 1
	}
	if f, ok := p.faces[k]; ok {
		return f
	}
	fs, err := fonts()
	if err != nil {
		panic("render: the embedded Go fonts do not parse: " + err.Error())
	}
	f, err := opentype.NewFace(fs[k[1]], &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		panic("render: " + err.Error())
	}
	p.faces[k] = f
	return f
}

func (p *pngCanvas) text(x, y float64, s string, size float64, bold bool, anchor int, c color.RGBA) {
	p.drawn = append(p.drawn, s)
	f := p.face(size, bold)
	d := &font.Drawer{Dst: p.img, Src: image.NewUniform(c), Face: f}
	w := d.MeasureString(s)
	dot := fixed.Point26_6{X: fixed.Int26_6(x * 64), Y: fixed.Int26_6(y * 64)}
	dot.X -= w * fixed.Int26_6(anchor) / 2
	d.Dot = dot
	d.DrawString(s)
}

func (p *pngCanvas) group(string) {}
func (p *pngCanvas) clip(x, y, w, h float64) {
	p.clipR = image.Rect(int(x), int(y), int(math.Ceil(x+w)), int(math.Ceil(y+h))).Intersect(p.img.Rect)
}
func (p *pngCanvas) unclip() { p.clipR = p.img.Rect }

// NightPNG draws the altitude plot as PNG, with the Go fonts (which have every glyph drawn).
func NightPNG(p *NightPlot) []byte {
	b, _ := nightPNG(p)
	return b
}

func nightPNG(p *NightPlot) ([]byte, []string) {
	l := layoutNight(p)
	c := newPNGCanvas(int(l.w), int(l.h))
	drawNight(c, p)
	return encodePNG(c.img), c.drawn
}

// MissingGlyphs lists the runes of the strings that the Go regular font has no glyph for
// (tests: every label drawn must be drawable).
func MissingGlyphs(strs []string) ([]rune, error) {
	fs, err := fonts()
	if err != nil {
		return nil, err
	}
	var buf sfnt.Buffer
	var missing []rune
	for _, s := range strs {
		for _, r := range s {
			for _, f := range fs {
				if i, err := f.GlyphIndex(&buf, r); err != nil || i == 0 {
					missing = append(missing, r)
					break
				}
			}
		}
	}
	return missing, nil
}
