// Package render draws visibility: an altitude-vs-time plot (SVG) and heatmaps of hours
// observable per source per day (SVG and PNG).
package render

import (
	"fmt"
	"html"
	"image"
	"image/color"
	"image/draw"
	"math"
	"strings"
	"time"

	"github.com/obsops/obsops/services/catalog/visibility"
)

// PlotInput is what the altitude plot shows.
type PlotInput struct {
	Title    string
	Subtitle string
	Result   *visibility.Result
	Start    time.Time
	End      time.Time
}

// Plot draws altitude against time (UTC): the altitude curve, the elevation limits, the
// Sun-avoidance periods (orange) and the observable windows (green).
func Plot(in PlotInput) []byte {
	const W, H = 900.0, 420.0
	const left, right, top, bottom = 60.0, 40.0, 56.0, 56.0
	pw, ph := W-left-right, H-top-bottom
	t0, t1 := in.Start, in.End
	span := t1.Sub(t0).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return left + pw*math.Max(0, math.Min(1, t.Sub(t0).Seconds()/span)) }
	minAlt := -30.0
	for _, s := range in.Result.Samples {
		minAlt = math.Min(minAlt, math.Floor(s.AltDeg/10)*10)
	}
	y := func(alt float64) float64 { return top + ph*(90-alt)/(90-minAlt) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica,Arial,sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(in.Title))
	fmt.Fprintf(&b, `<text x="%g" y="38" fill="#444">%s</text>`+"\n", left, esc(in.Subtitle))
	// shaded periods
	for _, iv := range in.Result.SunAvoidance {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#f5a623" fill-opacity="0.25"><title>Sun avoidance %s – %s</title></rect>`+"\n",
			x(iv.Start), top, x(iv.End)-x(iv.Start), ph, iv.Start.Format(time.RFC3339), iv.End.Format(time.RFC3339))
	}
	for _, w := range in.Result.Windows {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#2e9e44" fill-opacity="0.22"><title>observable %s – %s (%s → %s)</title></rect>`+"\n",
			x(w.Start), top, x(w.End)-x(w.Start), ph, w.Start.Format(time.RFC3339), w.End.Format(time.RFC3339), w.StartReason, w.EndReason)
	}
	// grid and altitude axis
	for a := minAlt; a <= 90; a += 10 {
		stroke := "#ddd"
		if a == 0 {
			stroke = "#888"
		}
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="%s"/>`+"\n", left, y(a), left+pw, y(a), stroke)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%g°</text>`+"\n", left-6, y(a)+4, a)
	}
	// time axis: ticks at whole hours (or days for long ranges)
	tick, format := timeTicks(t1.Sub(t0))
	first := t0.Truncate(tick)
	if first.Before(t0) {
		first = first.Add(tick)
	}
	for t := first; !t.After(t1); t = t.Add(tick) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`+"\n", x(t), top, x(t), top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x(t), top+ph+16, t.UTC().Format(format))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g">time (UTC)</text>`+"\n", left, H-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %g) rotate(-90)" text-anchor="middle">altitude (geometric)</text>`+"\n", top+ph/2)
	// limits
	lim := in.Result.MinElevationDeg
	fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", left, y(lim), left+pw, y(lim))
	fmt.Fprintf(&b, `<text x="%g" y="%.1f" fill="#c0392b" text-anchor="end">limit %g°</text>`+"\n", left+pw-4, y(lim)-4, lim)
	if in.Result.MaxElevationDeg < 90 {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", left, y(in.Result.MaxElevationDeg), left+pw, y(in.Result.MaxElevationDeg))
	}
	// the curve
	if len(in.Result.Samples) > 0 {
		b.WriteString(`<polyline fill="none" stroke="#1f4e9c" stroke-width="1.8" points="`)
		for i, s := range in.Result.Samples {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(s.Time), y(s.AltDeg))
		}
		b.WriteString(`"/>` + "\n")
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	// legend
	lx, ly := left+pw-330, H-20
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="12" fill="#2e9e44" fill-opacity="0.4"/><text x="%g" y="%g">observable</text>`+"\n", lx, ly, lx+16, ly+10)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="12" fill="#f5a623" fill-opacity="0.5"/><text x="%g" y="%g">Sun avoidance</text>`+"\n", lx+100, ly, lx+116, ly+10)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#c0392b" stroke-dasharray="6 4"/><text x="%g" y="%g">elevation limit</text>`+"\n", lx+215, ly+6, lx+240, ly+6, lx+244, ly+10)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func timeTicks(d time.Duration) (time.Duration, string) {
	switch {
	case d <= 6*time.Hour:
		return time.Hour, "15:04"
	case d <= 36*time.Hour:
		return 3 * time.Hour, "15:04"
	case d <= 4*24*time.Hour:
		return 12 * time.Hour, "Jan 2 15h"
	case d <= 40*24*time.Hour:
		return 4 * 24 * time.Hour, "Jan 2"
	default:
		return 30 * 24 * time.Hour, "2006-01-02"
	}
}

func esc(s string) string { return html.EscapeString(s) }

// HeatmapInput is what a heatmap image shows.
type HeatmapInput struct {
	Title  string
	Year   int
	Labels []string    // one per row
	Hours  [][]float64 // rows × days
}

// colour maps hours (0–24) to a perceptual scale: dark blue (0) → green → yellow (24).
func colour(h float64) color.RGBA {
	stops := []struct {
		at      float64
		r, g, b float64
	}{{0, 68, 1, 84}, {0.25, 59, 82, 139}, {0.5, 33, 145, 140}, {0.75, 94, 201, 98}, {1, 253, 231, 37}}
	f := math.Max(0, math.Min(1, h/24))
	for i := 1; i < len(stops); i++ {
		if f <= stops[i].at {
			a, b := stops[i-1], stops[i]
			t := (f - a.at) / (b.at - a.at)
			return color.RGBA{uint8(a.r + t*(b.r-a.r)), uint8(a.g + t*(b.g-a.g)), uint8(a.b + t*(b.b-a.b)), 255}
		}
	}
	return color.RGBA{253, 231, 37, 255}
}

type layout struct {
	cellW, cellH, left, top, w, h float64
}

func heatLayout(in *HeatmapInput) layout {
	cellH := 14.0
	if len(in.Labels) > 60 {
		cellH = math.Max(2, 840/float64(len(in.Labels)))
	}
	l := layout{cellW: 2, cellH: cellH, left: 170, top: 50}
	days := 0
	if len(in.Hours) > 0 {
		days = len(in.Hours[0])
	}
	l.w = l.left + l.cellW*float64(days) + 90
	l.h = math.Max(l.top+l.cellH*float64(len(in.Labels))+40, l.top+24*6+30) // room for the colour bar
	return l
}

// HeatmapSVG draws the heatmap as SVG: a row per source, a column per day, month labels and a
// colour bar in hours.
func HeatmapSVG(in HeatmapInput) []byte {
	l := heatLayout(&in)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica,Arial,sans-serif" font-size="11" shape-rendering="crispEdges">`+"\n", l.w, l.h, l.w, l.h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", l.w, l.h)
	fmt.Fprintf(&b, `<text x="%g" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", l.left, esc(in.Title))
	for r, row := range in.Hours {
		y := l.top + float64(r)*l.cellH
		if l.cellH >= 8 {
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", l.left-6, y+l.cellH-3, esc(in.Labels[r]))
		}
		// runs of equal colour become one rect
		for d := 0; d < len(row); {
			c := colour(row[d])
			e := d + 1
			for e < len(row) && colour(row[e]) == c {
				e++
			}
			fmt.Fprintf(&b, `<rect x="%g" y="%.1f" width="%g" height="%.1f" fill="#%02x%02x%02x"/>`, l.left+float64(d)*l.cellW, y, float64(e-d)*l.cellW, l.cellH, c.R, c.G, c.B)
			d = e
		}
		b.WriteByte('\n')
	}
	for m := time.January; m <= time.December; m++ {
		d := time.Date(in.Year, m, 1, 0, 0, 0, 0, time.UTC).YearDay() - 1
		x := l.left + float64(d)*l.cellW
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#999"/><text x="%g" y="%g">%s</text>`+"\n", x, l.top-12, x, l.top, x+2, l.top-3, m.String()[:3])
	}
	// colour bar
	bx := l.w - 70
	for i := range 24 {
		c := colour(float64(i) + 0.5)
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="14" height="6" fill="#%02x%02x%02x"/>`, bx, l.top+float64(23-i)*6, c.R, c.G, c.B)
	}
	fmt.Fprintf(&b, "\n"+`<text x="%g" y="%g">24 h</text><text x="%g" y="%g">12 h</text><text x="%g" y="%g">0 h</text>`+"\n", bx+18, l.top+6, bx+18, l.top+75, bx+18, l.top+144)
	fmt.Fprintf(&b, `<text x="%g" y="%g">hours observable per UTC day</text>`+"\n", l.left, l.h-12)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// HeatmapPNG draws the same heatmap as a PNG (labels in the Go fonts, which have "°", "–" and
// every other glyph drawn), with a colour scale legend in hours per day.
func HeatmapPNG(in HeatmapInput) []byte {
	b, _ := heatmapPNG(in)
	return b
}

func heatmapPNG(in HeatmapInput) ([]byte, []string) {
	l := heatLayout(&in)
	c := newPNGCanvas(int(l.w), int(l.h))
	img := c.img
	fill := func(x0, y0, x1, y1 int, col color.Color) {
		draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Src)
	}
	fill(0, 0, int(l.w), int(l.h), color.White)
	black := color.RGBA{0, 0, 0, 255}
	c.text(l.left, 18, in.Title, 13, true, 0, black)
	for r, row := range in.Hours {
		y0 := int(l.top + float64(r)*l.cellH)
		y1 := int(l.top + float64(r+1)*l.cellH)
		if l.cellH >= 12 {
			c.text(l.left-6, float64(y1-3), shorten(in.Labels[r], 26), 11, false, 2, black)
		}
		for d, h := range row {
			x0 := int(l.left + float64(d)*l.cellW)
			fill(x0, y0, x0+int(l.cellW), y1, colour(h))
		}
	}
	for m := time.January; m <= time.December; m++ {
		d := time.Date(in.Year, m, 1, 0, 0, 0, 0, time.UTC).YearDay() - 1
		x := int(l.left + float64(d)*l.cellW)
		fill(x, int(l.top)-12, x+1, int(l.top), color.Gray{150})
		c.text(float64(x+2), l.top-3, m.String()[:3], 11, false, 0, black)
	}
	// colour scale: 24 bands of one hour, ticks every 6 h, its unit above
	bx := int(l.w) - 70
	for i := range 24 {
		y := int(l.top) + (23-i)*6
		fill(bx, y, bx+14, y+6, colour(float64(i)+0.5))
	}
	for h := 0; h <= 24; h += 6 {
		y := int(l.top) + (24-h)*6
		fill(bx+14, y, bx+18, y+1, black)
		c.text(float64(bx+21), float64(y+4), fmt.Sprintf("%d h", h), 10, false, 0, black)
	}
	c.text(float64(bx-2), l.top-3, "hours/day", 10, false, 0, black)
	c.text(l.left, l.h-12, "hours observable per UTC day", 11, false, 0, black)
	return encodePNG(img), c.drawn
}
