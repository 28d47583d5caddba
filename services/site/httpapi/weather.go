package httpapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/weather"
)

// ---- POST /api/site/weather ----

type weatherPostInput struct {
	Body struct {
		Items []weather.Reading `json:"items" minItems:"1" maxItems:"1000" doc:"1-1000 readings: measurements (radiometer) and forecast points (a model's run)."`
	}
}

// WeatherWritten is the answer of a write: how many readings were stored (new or replaced).
type WeatherWritten struct {
	Stored int64 `json:"stored"`
}

func (h *Handlers) postWeather(ctx context.Context, in *weatherPostInput) (*bodyOut[WeatherWritten], error) {
	if err := weather.MayWrite(authn.PrincipalFrom(ctx)); err != nil {
		return nil, err
	}
	items := in.Body.Items
	if len(items) == 0 || len(items) > weather.MaxBatch {
		return nil, problem.Field("body.items", fmt.Sprintf("give 1-%d readings", weather.MaxBatch), len(items))
	}
	for i := range items {
		if err := items[i].Validate(fmt.Sprintf("body.items[%d]", i)); err != nil {
			return nil, err
		}
	}
	n, err := h.Weather.Insert(ctx, items)
	if err != nil {
		return nil, err
	}
	return &bodyOut[WeatherWritten]{Body: WeatherWritten{Stored: n}}, nil
}

// ---- GET /api/site/weather ----

type weatherGetInput struct {
	From   string `query:"from" doc:"RFC 3339; default 24 h ago."`
	To     string `query:"to" doc:"RFC 3339, exclusive; default 72 h from now; at most 31 days after from."`
	Kind   string `query:"kind" enum:"measurement,forecast" doc:"Only this kind (default both)."`
	Limit  int    `query:"limit" minimum:"1" maximum:"5000" doc:"Page size (default 500)."`
	Cursor string `query:"cursor" doc:"next_cursor of the previous page."`
}

// WeatherPage is a page of the series, with the PWV now as planning uses it.
type WeatherPage struct {
	From       time.Time         `json:"from"`
	To         time.Time         `json:"to"`
	Items      []weather.Reading `json:"items"`
	NextCursor *string           `json:"next_cursor" doc:"null on the last page."`
	Now        weather.PWV       `json:"now" doc:"The PWV now: the latest measurement within 30 minutes, else unknown."`
}

func (h *Handlers) getWeather(ctx context.Context, in *weatherGetInput) (*bodyOut[WeatherPage], error) {
	now := time.Now().UTC()
	from, to := now.Add(-24*time.Hour), now.Add(72*time.Hour)
	var err error
	if in.From != "" {
		if from, err = time.Parse(time.RFC3339Nano, in.From); err != nil {
			return nil, problem.Field("query.from", "must be an RFC 3339 time", in.From)
		}
	}
	if in.To != "" {
		if to, err = time.Parse(time.RFC3339Nano, in.To); err != nil {
			return nil, problem.Field("query.to", "must be an RFC 3339 time", in.To)
		}
	}
	switch {
	case !to.After(from):
		return nil, problem.Field("query.to", "must be after from", in.To)
	case to.Sub(from) > weather.MaxRange:
		return nil, problem.Field("query.to", "at most 31 days after from", in.To)
	}
	q := weather.Query{From: from.UTC(), To: to.UTC(), Kind: in.Kind, Limit: in.Limit}
	if q.Limit == 0 {
		q.Limit = weather.DefaultPage
	}
	if in.Cursor != "" {
		ts, id, ok := strings.Cut(in.Cursor, ",")
		at, err1 := time.Parse(time.RFC3339Nano, ts)
		n, err2 := strconv.ParseInt(id, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, problem.Field("query.cursor", "not a cursor of this route (use next_cursor as given)", in.Cursor)
		}
		q.AfterTime, q.AfterID = &at, n
	}
	items, more, err := h.Weather.List(ctx, q)
	if err != nil {
		return nil, err
	}
	series, err := h.Weather.Load(ctx, now, now, now)
	if err != nil {
		return nil, err
	}
	page := WeatherPage{From: q.From, To: q.To, Items: items, Now: series.At(now)}
	if page.Items == nil {
		page.Items = []weather.Reading{}
	}
	if more {
		last := items[len(items)-1]
		c := last.Time.Format(time.RFC3339Nano) + "," + strconv.FormatInt(last.ID, 10)
		page.NextCursor = &c
	}
	return &bodyOut[WeatherPage]{Body: page}, nil
}

type bodyOut[T any] struct{ Body T }
