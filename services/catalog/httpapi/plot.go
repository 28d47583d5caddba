package httpapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/render"
)

// ---- GET /visibility/plot ----

type plotInput struct {
	SourceIDs       []int64 `query:"source_id,explode" maxItems:"10" doc:"1-10 source ids, repeated: source_id=1&source_id=2."`
	Start           string  `query:"start" doc:"RFC 3339; default now."`
	End             string  `query:"end" doc:"RFC 3339; default start + 24 h; at most 72 h after start."`
	StepS           int64   `query:"step_s" minimum:"60" maximum:"3600" doc:"Seconds between the curves' samples (default 300)."`
	MinElevationDeg float64 `query:"min_elevation_deg" minimum:"0" maximum:"90" doc:"Lower elevation limit instead of the site's."`
	ObsUnitID       int64   `query:"obs_unit_id" minimum:"1" doc:"An obs unit of one of the sources: its constraints shape that source's windows (as GET /visibility/{source_id}?obs_unit_id=)."`
	Format          string  `query:"format" enum:"svg,png" doc:"svg (default) or png; or Accept: image/png."`
	Accept          string  `header:"Accept"`
	minElSet        bool
}

// Resolve notes whether min_elevation_deg was given and rejects unknown parameters.
func (in *plotInput) Resolve(ctx huma.Context) []error {
	u := ctx.URL()
	in.minElSet = u.Query().Has("min_elevation_deg")
	return unknownParams(ctx, "source_id", "start", "end", "step_s", "min_elevation_deg", "obs_unit_id", "format")
}

func plotResponses() map[string]*huma.Response {
	img := &huma.Schema{Type: huma.TypeString, Description: "Altitude against UTC with local time, LST and airmass axes, twilight shading, the Moon, limits, windows and a legend."}
	return map[string]*huma.Response{"200": {
		Description: "The altitude plot.",
		Content:     map[string]*huma.MediaType{"image/svg+xml": {Schema: img}, "image/png": {Schema: img}},
	}}
}

func (h *Handlers) plot(ctx context.Context, in *plotInput) (*rawOutput, error) {
	q := catalog.PlotQuery{SourceIDs: in.SourceIDs, Start: in.Start, End: in.End, StepS: in.StepS, ObsUnitID: in.ObsUnitID}
	if in.minElSet {
		q.MinElevationDeg = &in.MinElevationDeg
	}
	d, err := h.Catalog.Plot(ctx, q)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(d.Sources))
	for i, s := range d.Sources {
		names[i] = s.Source.Name
	}
	title := strings.Join(names, ", ")
	if len(title) > 90 {
		title = fmt.Sprintf("%d sources", len(names))
	}
	p := nightPlot(h.Catalog.Site, d, "Altitude of "+title)
	if in.Format == "png" || in.Format == "" && strings.Contains(in.Accept, "image/png") {
		return &rawOutput{ContentType: "image/png", Body: render.NightPNG(p)}, nil
	}
	return &rawOutput{ContentType: "image/svg+xml", Body: render.NightSVG(p)}, nil
}

// nightPlot turns a plot's data into what the renderer draws.
func nightPlot(site *visibility.Site, d catalog.PlotData, title string) *render.NightPlot {
	p := &render.NightPlot{Title: title, Start: d.Start, End: d.End, Location: site.Location(), Sky: d.Sky,
		MaxElevationDeg: site.MaxElevationDeg, MinElevationDeg: site.MinElevationDeg}
	for _, s := range d.Sources {
		label := fmt.Sprintf("%s (source %d)", s.Source.Name, s.Source.ID)
		if u := d.ObsUnit; u != nil && u.SourceID == s.Source.ID {
			label = fmt.Sprintf("%s (source %d, unit %s)", s.Source.Name, s.Source.ID, u.Name)
		}
		p.Sources = append(p.Sources, render.NightSource{Label: label, Result: s.Result})
		p.MinElevationDeg = s.Result.MinElevationDeg
	}
	alt := "geometric altitude"
	if site.Refraction {
		alt = "refracted altitude"
	}
	p.Subtitle = fmt.Sprintf("from %s · %s · Sun avoidance %g° · samples every %s", siteName(site), alt, site.SunAvoidanceDeg, d.Step)
	if u := d.ObsUnit; u != nil {
		p.Subtitle += fmt.Sprintf(" · obs unit %s's constraints on its source", u.Name)
	}
	return p
}
