// Package weather is the site's weather series: precipitable water vapour (PWV) measured by a
// radiometer or forecast by a model, the rules a reading obeys, and the PWV at a time that
// planning uses (At: the measurement for the past and now, the latest forecast for the future,
// else unknown). The site service stores and serves the series (table site_weather); the
// catalog's visibility reads it for obs units' PWV limits. Both use this package.
package weather

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// MayWrite is the rule of who writes readings, beyond the route's (an admin's session JWT or a
// service account's token with write:weather): a service account must be of kind weather — a
// radiometer or a forecast feed —, so an instrument's or a mover's token, or one of an account
// without a kind, gets 403 even with the scope.
func MayWrite(p *authn.Principal) error {
	if p == nil || p.Method != authn.MethodAPIToken {
		return nil // an admin's session: the access table admitted nothing else
	}
	if p.Service == nil || p.Service.Kind != authn.KindWeather {
		return problem.Forbidden.New("weather readings are written by a service account of kind weather (or an admin)")
	}
	return nil
}

// Kinds of a reading, and of an answer of At.
const (
	KindMeasurement = "measurement" // measured (radiometer) at that time
	KindForecast    = "forecast"    // forecast (a model's run issued at IssuedAt) for that time
	KindUnknown     = "unknown"     // At: no measurement or forecast covers the time
)

// Limits of the series' writes and reads.
const (
	MaxBatch    = 1000                // readings per POST
	MaxPage     = 5000                // readings per GET page
	DefaultPage = 500                 // readings per GET page unless limit is given
	MaxRange    = 31 * 24 * time.Hour // a GET's from–to span
	MaxPWVmm    = 50                  // above any atmosphere's column (a typo in units)
	// MaxMeasurementAge is how long a measurement stands for the times after it (radiometers
	// report every few minutes; older than this, the PWV is unknown).
	MaxMeasurementAge = 30 * time.Minute
	// MaxForecastGap is the longest interval between a run's points that At interpolates across.
	MaxForecastGap = 6 * time.Hour
)

// Reading is one point of the series.
type Reading struct {
	ID       int64      `json:"id,omitempty" db:"id" doc:"Set by the server."`
	Kind     string     `json:"kind" db:"kind" enum:"measurement,forecast"`
	Time     time.Time  `json:"time" db:"at" doc:"When the value applies (RFC 3339)."`
	PWVmm    float64    `json:"pwv_mm" db:"pwv_mm" minimum:"0" maximum:"50" doc:"Precipitable water vapour, millimetres."`
	Source   string     `json:"source" db:"source" minLength:"1" maxLength:"100" example:"radiometer" doc:"What produced it: the radiometer, or the forecast model."`
	IssuedAt *time.Time `json:"issued_at,omitempty" db:"issued_at" doc:"Forecasts: when the run was issued (required); measurements: absent."`
}

// Validate checks a reading at path (e.g. "body.items[3]"): kind, a time within 1900–2100, PWV
// within [0, 50] mm, a source of 1–100 characters, issued_at for (and only for) forecasts. It
// normalises times to UTC and trims the source.
func (r *Reading) Validate(path string) error {
	switch {
	case r.Kind != KindMeasurement && r.Kind != KindForecast:
		return problem.Field(path+".kind", "must be measurement or forecast", r.Kind)
	case r.Time.IsZero() || r.Time.Year() < 1900 || r.Time.Year() > 2100:
		return problem.Field(path+".time", "must be an RFC 3339 time within 1900–2100", r.Time)
	case math.IsNaN(r.PWVmm) || r.PWVmm < 0 || r.PWVmm > MaxPWVmm:
		return problem.Field(path+".pwv_mm", fmt.Sprintf("must be within [0, %d] mm", MaxPWVmm), r.PWVmm)
	case strings.TrimSpace(r.Source) == "" || len(r.Source) > 100:
		return problem.Field(path+".source", "1–100 characters: the radiometer or the forecast model", r.Source)
	case r.Kind == KindForecast && r.IssuedAt == nil:
		return problem.Field(path+".issued_at", "a forecast names its run: when it was issued", nil)
	case r.Kind == KindMeasurement && r.IssuedAt != nil:
		return problem.Field(path+".issued_at", "only forecasts have a run; leave it out for measurements", r.IssuedAt)
	}
	r.Source = strings.TrimSpace(r.Source)
	r.Time = r.Time.UTC()
	if r.IssuedAt != nil {
		t := r.IssuedAt.UTC()
		r.IssuedAt = &t
	}
	return nil
}

// PWV is the PWV at a time as planning sees it.
type PWV struct {
	Kind     string     `json:"kind" enum:"measurement,forecast,unknown"`
	PWVmm    *float64   `json:"pwv_mm" doc:"null when unknown."`
	Source   string     `json:"source,omitempty"`
	At       *time.Time `json:"at,omitempty" doc:"The reading's time (a measurement), or the first of the two forecast points interpolated."`
	IssuedAt *time.Time `json:"issued_at,omitempty" doc:"The forecast run used."`
}

// Series answers the PWV at times, from the readings around them (Store.Load).
type Series struct {
	now          time.Time
	measurements []Reading   // by time
	runs         [][]Reading // forecast runs issued at or before now, newest first; points by time
	issued       []time.Time // runs' issue times, newest first
}

// NewSeries builds a series from readings as of now: forecasts issued after now are ignored
// (they did not exist then).
func NewSeries(readings []Reading, now time.Time) *Series {
	s := &Series{now: now}
	runs := map[time.Time][]Reading{}
	for _, r := range readings {
		switch r.Kind {
		case KindMeasurement:
			s.measurements = append(s.measurements, r)
		case KindForecast:
			if r.IssuedAt != nil && !r.IssuedAt.After(now) {
				runs[*r.IssuedAt] = append(runs[*r.IssuedAt], r)
			}
		}
	}
	sort.Slice(s.measurements, func(i, j int) bool { return s.measurements[i].Time.Before(s.measurements[j].Time) })
	for at := range runs {
		s.issued = append(s.issued, at)
	}
	sort.Slice(s.issued, func(i, j int) bool { return s.issued[i].After(s.issued[j]) })
	for _, at := range s.issued {
		pts := runs[at]
		sort.Slice(pts, func(i, j int) bool { return pts[i].Time.Before(pts[j].Time) })
		s.runs = append(s.runs, pts)
	}
	return s
}

// At is the PWV at t: for t at or before now, the latest measurement at or before t not older
// than MaxMeasurementAge; for t after now, the newest run (issued at or before now) with points
// around t (interpolated linearly, points at most MaxForecastGap apart, or a point exactly at
// t); otherwise unknown. Never a silent value: the kind says which was used.
func (s *Series) At(t time.Time) PWV {
	if !t.After(s.now) {
		i := sort.Search(len(s.measurements), func(i int) bool { return s.measurements[i].Time.After(t) }) - 1
		if i >= 0 && t.Sub(s.measurements[i].Time) <= MaxMeasurementAge {
			m := s.measurements[i]
			v, at := m.PWVmm, m.Time
			return PWV{Kind: KindMeasurement, PWVmm: &v, Source: m.Source, At: &at}
		}
		return PWV{Kind: KindUnknown}
	}
	for k, pts := range s.runs {
		j := sort.Search(len(pts), func(i int) bool { return !pts[i].Time.Before(t) })
		if j < len(pts) && pts[j].Time.Equal(t) {
			return forecast(pts[j], pts[j].PWVmm, s.issued[k])
		}
		if j == 0 || j == len(pts) {
			continue
		}
		a, b := pts[j-1], pts[j]
		if b.Time.Sub(a.Time) > MaxForecastGap {
			continue
		}
		f := t.Sub(a.Time).Seconds() / b.Time.Sub(a.Time).Seconds()
		return forecast(a, a.PWVmm+f*(b.PWVmm-a.PWVmm), s.issued[k])
	}
	return PWV{Kind: KindUnknown}
}

func forecast(p Reading, v float64, issued time.Time) PWV {
	at := p.Time
	return PWV{Kind: KindForecast, PWVmm: &v, Source: p.Source, At: &at, IssuedAt: &issued}
}

// Breaks lists the times in (from, to) where At may change otherwise than linearly: every
// measurement's time and its expiry (MaxMeasurementAge later) up to now, now itself, and every
// forecast point after now. Between two consecutive breaks At keeps its kind and reading (a
// measurement) or run (a forecast, linear between two points), so a search that evaluates At at
// every break misses no change of a limit's verdict. Sorted, without repeats.
func (s *Series) Breaks(from, to time.Time) []time.Time {
	var out []time.Time
	add := func(t time.Time) {
		if t.After(from) && t.Before(to) {
			out = append(out, t)
		}
	}
	for _, m := range s.measurements {
		if !m.Time.After(s.now) {
			add(m.Time)
			if e := m.Time.Add(MaxMeasurementAge); !e.After(s.now) {
				add(e)
			}
		}
	}
	add(s.now)
	for _, pts := range s.runs {
		for _, p := range pts {
			if p.Time.After(s.now) {
				add(p.Time)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	k := 0
	for i, t := range out {
		if i == 0 || !t.Equal(out[k-1]) {
			out[k] = t
			k++
		}
	}
	return out[:k]
}
