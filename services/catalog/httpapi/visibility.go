package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/tables"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
	"github.com/obsops/obsops/services/catalog/visibility/render"
)

// The /visibility routes' inputs and answers (the routes are listed in routes.go).

// ---- shared input checks ----

// unknownParams rejects query parameters an operation does not define (a typo must not silently
// give a default answer).
func unknownParams(ctx huma.Context, allowed ...string) []error {
	var errs []error
	u := ctx.URL()
	for name := range u.Query() {
		known := false
		for _, a := range allowed {
			known = known || name == a
		}
		if !known {
			errs = append(errs, &huma.ErrorDetail{Location: "query." + name, Message: "unknown parameter; allowed: " + strings.Join(allowed, ", ")})
		}
	}
	return errs
}

// ---- GET /visibility/{source_id} ----

type visibilityInput struct {
	SourceID        int64   `path:"source_id" minimum:"1" doc:"Source id."`
	Start           string  `query:"start" doc:"RFC 3339 (fractional seconds kept exactly); default now."`
	End             string  `query:"end" doc:"RFC 3339; default start + 24 h."`
	StepS           int64   `query:"step_s" minimum:"1" maximum:"95040000" default:"600" doc:"Seconds between samples (at most the longest range, 1100 days)."`
	MinElevationDeg float64 `query:"min_elevation_deg" minimum:"0" maximum:"90" doc:"Lower elevation limit instead of the site's (and instead of the obs unit's)."`
	ObsUnitID       int64   `query:"obs_unit_id" minimum:"1" doc:"An obs unit of this source: its constraints (min_elevation_deg, max_airmass, min_moon_separation_deg, min_sun_separation_deg, max_pwv_mm, lst_range, time_windows) apply on top of the site's."`
	Format          string  `query:"format" enum:"json,svg,png,csv" doc:"svg, png: the altitude plot (as Accept: image/svg+xml, image/png); csv: the samples as CSV (as Accept: text/csv)."`
	Accept          string  `header:"Accept"`
	minElSet        bool
}

// Resolve notes whether min_elevation_deg was given and rejects unknown parameters.
func (in *visibilityInput) Resolve(ctx huma.Context) []error {
	u := ctx.URL()
	in.minElSet = u.Query().Has("min_elevation_deg")
	return unknownParams(ctx, "start", "end", "step_s", "min_elevation_deg", "obs_unit_id", "format")
}

// VisibilityResponse is the visibility of a source over a range.
type VisibilityResponse struct {
	SourceID        int64                 `json:"source_id"`
	SourceName      string                `json:"source_name"`
	Start           time.Time             `json:"start"`
	End             time.Time             `json:"end"`
	StepS           int64                 `json:"step_s"`
	MinElevationDeg float64               `json:"min_elevation_deg" doc:"The lower elevation limit applied."`
	MaxElevationDeg float64               `json:"max_elevation_deg"`
	SunAvoidanceDeg float64               `json:"sun_avoidance_deg" doc:"The Sun avoidance applied: the obs unit's min_sun_separation_deg, else the site's."`
	Refraction      bool                  `json:"refraction" doc:"Whether altitudes include refraction (OPS_SITE_REFRACTION)."`
	ObsUnit         *VisibilityObsUnit    `json:"obs_unit,omitempty" doc:"The obs unit whose constraints were applied (obs_unit_id)."`
	PWVAsOf         *time.Time            `json:"pwv_as_of,omitempty" doc:"With a PWV limit: the instant dividing measured PWV (at or before) from forecast PWV (after)."`
	Samples         []visibility.Sample   `json:"samples"`
	Windows         []visibility.Window   `json:"windows"`
	SunAvoidance    []visibility.Interval `json:"sun_avoidance" doc:"Periods in which the source is closer to the Sun than the avoidance radius."`
	Rise            *time.Time            `json:"rise" doc:"Next time after start the source rises above the elevation limit (null: not within 26 h)."`
	Set             *time.Time            `json:"set" doc:"Next time after start it sets below the elevation limit."`
	Transit         *time.Time            `json:"transit" doc:"Next upper culmination after start."`
	MaxAltDeg       float64               `json:"max_alt_deg"`
	HoursObservable float64               `json:"hours_observable"`
}

// VisibilityObsUnit is the obs unit whose constraints a visibility applied.
type VisibilityObsUnit struct {
	ID              int64    `json:"id"`
	Name            string   `json:"name"`
	MinElevationDeg *float64 `json:"min_elevation_deg"`
	catalog.ObsUnitConstraints
}

// csvOutput answers a table as CSV.
func csvOutput(t tables.Table) (*rawOutput, error) {
	var buf bytes.Buffer
	if err := tables.WriteCSV(&buf, t); err != nil {
		return nil, fmt.Errorf("encode csv: %w", err)
	}
	return &rawOutput{ContentType: tables.CSV.ContentType(), Body: buf.Bytes()}, nil
}

type rawOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

func visibilityResponses(api huma.API) map[string]*huma.Response {
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[VisibilityResponse](), true, "VisibilityResponse")
	return map[string]*huma.Response{"200": {
		Description: "The visibility (JSON) or the altitude plot (SVG).",
		Content: map[string]*huma.MediaType{
			"application/json": {Schema: schema},
			"image/svg+xml":    {Schema: &huma.Schema{Type: huma.TypeString, Description: "The altitude plot (as GET /visibility/plot for ranges up to 72 h; longer: altitude against UTC with the limit, Sun avoidance and windows shaded)."}},
			"image/png":        {Schema: &huma.Schema{Type: huma.TypeString, Description: "The altitude plot as PNG (ranges up to 72 h)."}},
			tables.MediaCSV:    {Schema: &huma.Schema{Type: huma.TypeString, Description: "The samples: time_utc, alt_deg, az_deg, airmass, sun_sep_deg, observable."}},
		},
	}}
}

func (h *Handlers) sourceVisibility(ctx context.Context, in *visibilityInput) (*rawOutput, error) {
	q := catalog.VisibilityQuery{SourceID: in.SourceID, Start: in.Start, End: in.End, StepS: in.StepS, ObsUnitID: in.ObsUnitID}
	if in.minElSet {
		q.MinElevationDeg = &in.MinElevationDeg
	}
	v, err := h.Catalog.SourceVisibility(ctx, q)
	if err != nil {
		return nil, err
	}
	site, res, src := h.Catalog.Site, v.Result, v.Source
	if in.Format == "csv" || in.Format == "" && tables.Negotiate("", in.Accept) == tables.CSV {
		return csvOutput(tables.Samples(src.Name, res.Samples))
	}
	png := in.Format == "png" || in.Format == "" && strings.Contains(in.Accept, "image/png")
	if (png || in.Format == "svg" || in.Format == "" && wantsSVG(in.Accept)) && v.End.Sub(v.Start) <= catalog.MaxPlotRange && v.End.After(v.Start) {
		// up to 72 h: the night plot (local time, LST, airmass, twilight, Moon), as GET /visibility/plot
		d := catalog.PlotData{Start: v.Start, End: v.End, Step: time.Duration(in.StepS) * time.Second,
			Sources: []catalog.PlotSource{{Source: src, Result: res}}, ObsUnit: v.ObsUnit,
			Sky: visibility.Sky(site, v.Start, v.End, time.Duration(in.StepS)*time.Second)}
		p := nightPlot(site, d, fmt.Sprintf("Altitude of %s", src.Name))
		if png {
			return &rawOutput{ContentType: "image/png", Body: render.NightPNG(p)}, nil
		}
		return &rawOutput{ContentType: "image/svg+xml", Body: render.NightSVG(p)}, nil
	}
	if png {
		return nil, problem.Field("query.format", "png draws ranges of at most 72 h; use svg for longer ranges", in.Format)
	}
	if in.Format == "svg" || in.Format == "" && wantsSVG(in.Accept) {
		sub := fmt.Sprintf("%s – %s UTC · limit %g° · Sun avoidance %g° · %.2f h observable",
			v.Start.Format("2006-01-02 15:04"), v.End.Format("2006-01-02 15:04"), res.MinElevationDeg, v.SunAvoidanceDeg, res.HoursObservable)
		return &rawOutput{ContentType: "image/svg+xml", Body: render.Plot(render.PlotInput{
			Title: fmt.Sprintf("%s (source %d) from %s", src.Name, src.ID, siteName(site)), Subtitle: sub, Result: res, Start: v.Start, End: v.End})}, nil
	}
	body := VisibilityResponse{SourceID: src.ID, SourceName: src.Name, Start: v.Start, End: v.End, StepS: in.StepS,
		MinElevationDeg: res.MinElevationDeg, MaxElevationDeg: site.MaxElevationDeg, SunAvoidanceDeg: v.SunAvoidanceDeg,
		Refraction: site.Refraction, PWVAsOf: v.WeatherAsOf, Samples: res.Samples, Windows: res.Windows, SunAvoidance: res.SunAvoidance,
		Rise: res.Rise, Set: res.Set, Transit: res.Transit, MaxAltDeg: res.MaxAltDeg, HoursObservable: res.HoursObservable}
	if u := v.ObsUnit; u != nil {
		body.ObsUnit = &VisibilityObsUnit{ID: u.ID, Name: u.Name, MinElevationDeg: u.MinElevationDeg, ObsUnitConstraints: u.ObsUnitConstraints}
	}
	if body.Windows == nil {
		body.Windows = []visibility.Window{}
	}
	if body.SunAvoidance == nil {
		body.SunAvoidance = []visibility.Interval{}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode visibility: %w", err)
	}
	return &rawOutput{ContentType: "application/json", Body: b}, nil
}

func siteName(s *visibility.Site) string {
	return fmt.Sprintf("%.4f°, %.4f°, %g m", s.LatitudeDeg, s.LongitudeDeg, s.ElevationM)
}

// wantsSVG: the Accept header prefers an SVG image to JSON.
func wantsSVG(accept string) bool {
	return strings.Contains(accept, "image/svg+xml") && !strings.Contains(accept, "application/json")
}

// ---- GET /visibility/heatmap ----

type heatmapInput struct {
	Year      int    `query:"year" required:"true" minimum:"1900" maximum:"2100" doc:"Calendar year (UTC days)."`
	ProgramID int64  `query:"program_id" minimum:"1" doc:"The distinct sources of this program's obs units."`
	SourceIDs string `query:"source_ids" doc:"Comma-separated source ids (instead of program_id), at most 5000."`
	Format    string `query:"format" enum:"json,svg,png,csv" default:"json" doc:"svg or png draw it; csv is one row per source and day."`
}

// Resolve rejects unknown parameters.
func (in *heatmapInput) Resolve(ctx huma.Context) []error {
	return unknownParams(ctx, "year", "program_id", "source_ids", "format")
}

// HeatmapSource names a row of the heatmap.
type HeatmapSource struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// HeatmapParameters are the inputs the heatmap was computed for.
type HeatmapParameters struct {
	Year            int     `json:"year"`
	ProgramID       *int64  `json:"program_id,omitempty"`
	SourceIDs       []int64 `json:"source_ids"`
	LatitudeDeg     float64 `json:"latitude_deg"`
	LongitudeDeg    float64 `json:"longitude_deg"`
	ElevationM      float64 `json:"elevation_m"`
	MinElevationDeg float64 `json:"min_elevation_deg"`
	MaxElevationDeg float64 `json:"max_elevation_deg"`
	SunAvoidanceDeg float64 `json:"sun_avoidance_deg"`
	Refraction      bool    `json:"refraction"`
}

// HeatmapResponse is hours observable per source (rows) per UTC day (columns).
type HeatmapResponse struct {
	Days        []string          `json:"days" doc:"The UTC days (YYYY-MM-DD), the columns of hours."`
	Sources     []HeatmapSource   `json:"sources" doc:"The rows of hours."`
	Hours       hoursMatrix       `json:"hours" doc:"hours[source][day]: hours observable, to 0.01 h."`
	GeneratedAt time.Time         `json:"generated_at" doc:"When the oldest row was computed."`
	Cached      bool              `json:"cached" doc:"true: every row came from the cache; false: some were computed for this request (and cached)."`
	Parameters  HeatmapParameters `json:"parameters"`
}

func heatmapResponses(api huma.API) map[string]*huma.Response {
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[HeatmapResponse](), true, "HeatmapResponse")
	img := &huma.Schema{Type: huma.TypeString, Description: "Sources × days, colour scale 0–24 h, labels."}
	return map[string]*huma.Response{"200": {
		Description: "The heatmap (JSON), or drawn (format=svg, png).",
		Content: map[string]*huma.MediaType{
			"application/json": {Schema: schema}, "image/svg+xml": {Schema: img}, "image/png": {Schema: img},
			tables.MediaCSV: {Schema: &huma.Schema{Type: huma.TypeString, Description: "source_id, source_name, date, hours_observable: one row per source and day."}},
		},
	}}
}

func (h *Handlers) heatmap(ctx context.Context, in *heatmapInput) (*rawOutput, error) {
	hm, err := h.Catalog.Heatmap(ctx, catalog.HeatmapQuery{Year: in.Year, ProgramID: in.ProgramID, SourceIDs: in.SourceIDs})
	if err != nil {
		return nil, err
	}
	site := h.Catalog.Site
	params := HeatmapParameters{Year: in.Year, ProgramID: hm.ProgramID, SourceIDs: hm.SourceIDs,
		LatitudeDeg: site.LatitudeDeg, LongitudeDeg: site.LongitudeDeg, ElevationM: site.ElevationM,
		MinElevationDeg: site.MinElevationDeg, MaxElevationDeg: site.MaxElevationDeg, SunAvoidanceDeg: site.SunAvoidanceDeg, Refraction: site.Refraction}
	days := visibility.DaysIn(in.Year)
	body := HeatmapResponse{Days: make([]string, days), Sources: make([]HeatmapSource, len(hm.Sources)), Hours: hm.Hours,
		GeneratedAt: hm.GeneratedAt, Cached: hm.Cached, Parameters: params}
	d0 := time.Date(in.Year, 1, 1, 0, 0, 0, 0, time.UTC)
	for d := range days {
		body.Days[d] = d0.AddDate(0, 0, d).Format(time.DateOnly)
	}
	labels := make([]string, len(hm.Sources))
	for i, s := range hm.Sources {
		body.Sources[i] = HeatmapSource{ID: s.ID, Name: s.Name}
		labels[i] = s.Name
	}
	switch in.Format {
	case "csv":
		rows := make([]tables.HeatmapSource, len(hm.Sources))
		for i, s := range hm.Sources {
			rows[i] = tables.HeatmapSource{ID: s.ID, Name: s.Name}
		}
		return csvOutput(tables.Heatmap(fmt.Sprintf("heatmap-%d", in.Year), rows, body.Days, hm.Hours))
	case "svg", "png":
		img := render.HeatmapInput{Title: fmt.Sprintf("Hours observable per day, %d (limit %g°, Sun avoidance %g°)", in.Year, site.MinElevationDeg, site.SunAvoidanceDeg),
			Year: in.Year, Labels: labels, Hours: hm.Hours}
		if in.Format == "png" {
			return &rawOutput{ContentType: "image/png", Body: render.HeatmapPNG(img)}, nil
		}
		return &rawOutput{ContentType: "image/svg+xml", Body: render.HeatmapSVG(img)}, nil
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode heatmap: %w", err)
	}
	return &rawOutput{ContentType: "application/json", Body: b}, nil
}

// ---- POST /visibility/precalculate, GET /visibility/precalculate/{job_id} ----

type precalculateBody struct {
	Year      int     `json:"year" minimum:"1900" maximum:"2100" doc:"Calendar year (UTC days)."`
	ProgramID *int64  `json:"program_id,omitempty" minimum:"1" doc:"The sources of this program's obs units."`
	SourceIDs []int64 `json:"source_ids,omitempty" minItems:"1" maxItems:"5000" doc:"These sources."`
	All       bool    `json:"all,omitempty" doc:"Every source."`
}

// hoursMatrix is hours[source][day], written to 0.01 h by hand: encoding/json's float formatting
// was most of the time of serving a cached heatmap.
type hoursMatrix [][]float64

// MarshalJSON writes the matrix with two decimals (trailing zeros dropped).
func (m hoursMatrix) MarshalJSON() ([]byte, error) {
	n := 2
	for _, row := range m {
		n += 2 + 6*len(row)
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, row := range m {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for d, h := range row {
			if d > 0 {
				b = append(b, ',')
			}
			c := int64(math.Round(h * 100)) // centi-hours, 0..2400
			if c < 0 || math.IsNaN(h) {
				c = 0
			}
			b = strconv.AppendInt(b, c/100, 10)
			if f := c % 100; f != 0 {
				b = append(b, '.', byte('0'+f/10))
				if f%10 != 0 {
					b = append(b, byte('0'+f%10))
				}
			}
		}
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// PrecalculateResponse is a queued (or already queued) precalculation.
type PrecalculateResponse struct {
	JobID        int64  `json:"job_id"`
	Status       string `json:"status" enum:"queued,running,completed,failed"`
	SourcesTotal int    `json:"sources_total"`
	Year         int    `json:"year"`
}

type precalculateOutput struct {
	Location string `header:"Location"`
	Body     PrecalculateResponse
}

func (h *Handlers) precalculate(ctx context.Context, in *struct{ Body precalculateBody }) (*precalculateOutput, error) {
	b := in.Body
	job, err := h.Catalog.Precalculate(ctx, caller(ctx), catalog.PrecalcRequest{Year: b.Year, ProgramID: b.ProgramID, SourceIDs: b.SourceIDs, All: b.All})
	if err != nil {
		return nil, err
	}
	return &precalculateOutput{Location: "/visibility/precalculate/" + strconv.FormatInt(job.ID, 10),
		Body: PrecalculateResponse{JobID: job.ID, Status: job.Status, SourcesTotal: job.SourcesTotal, Year: job.Year}}, nil
}

type jobInput struct {
	JobID int64 `path:"job_id" minimum:"1"`
}

func (h *Handlers) precalculationJob(ctx context.Context, in *jobInput) (*struct{ Body precalc.Job }, error) {
	j, err := h.Catalog.PrecalculationJob(ctx, in.JobID)
	if err != nil {
		return nil, err
	}
	return &struct{ Body precalc.Job }{Body: j}, nil
}
