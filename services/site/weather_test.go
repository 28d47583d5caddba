package site_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/pkg/weather"
)

// TestWeatherSeries: POST /api/site/weather by an admin or a weather service account (write:weather),
// refused for others, 422 naming the field with nothing written; GET anonymous, paged by
// cursor, with the PWV now; a re-posted point replaces its value; pruning removes old readings.
// Through the gateway.
func TestWeatherSeries(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"transfer", "ingest", "catalog"}})
	admin := s.JWT(t, "ops-admin", "admin")
	viewer := s.JWT(t, "viewer1", "viewer")
	station := s.Admin(t, "create-service-token", "--account", "weather-station", "--kind", "weather", "--scopes", "write:weather", "--name", "pwv")
	// an instrument's account holding write:weather is still not a weather station
	instrument := s.Admin(t, "create-service-token", "--account", "daq-weather", "--kind", "instrument", "--instruments", "1", "--scopes", "write:weather", "--name", "w")
	other := s.Admin(t, "create-service-token", "--account", "daq", "--scopes", "write:data", "--name", "daq")
	u := s.GatewayURL + "/api/site/weather"

	now := time.Now().UTC().Truncate(time.Minute)
	issued := now.Add(-time.Hour).Format(time.RFC3339)
	var items []map[string]any
	for i := range 30 { // measurements every 10 min up to now
		items = append(items, map[string]any{"kind": "measurement", "time": now.Add(-time.Duration(29-i) * 10 * time.Minute).Format(time.RFC3339),
			"pwv_mm": 0.5 + float64(i)/100, "source": "radiometer"})
	}
	for h := range 6 { // a forecast run, hourly
		items = append(items, map[string]any{"kind": "forecast", "time": now.Add(time.Duration(h) * time.Hour).Format(time.RFC3339),
			"pwv_mm": 1.0 + float64(h)/10, "source": "forecast model", "issued_at": issued})
	}
	r := call(t, http.MethodPost, u, station, map[string]any{"items": items})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"stored":36}`, string(r.Body))

	// access: an admin may write; a viewer, another service account and anonymous may not
	one := []map[string]any{{"kind": "measurement", "time": now.Format(time.RFC3339), "pwv_mm": 0.42, "source": "radiometer"}}
	r = call(t, http.MethodPost, u, admin, map[string]any{"items": one})
	require.Equal(t, 200, r.Status, "%s", r.Body) // replaces the station's value at now
	require.Equal(t, 403, call(t, http.MethodPost, u, viewer, map[string]any{"items": one}).Status)
	require.Equal(t, 403, call(t, http.MethodPost, u, other, map[string]any{"items": one}).Status)
	require.Equal(t, 403, call(t, http.MethodPost, u, instrument, map[string]any{"items": one}).Status)
	require.Equal(t, 401, call(t, http.MethodPost, u, "", map[string]any{"items": one}).Status)

	// 422 naming the field; nothing of the batch written
	bad := []map[string]any{one[0], {"kind": "measurement", "time": now.Add(time.Minute).Format(time.RFC3339), "pwv_mm": 80, "source": "radiometer"}}
	r = call(t, http.MethodPost, u, admin, map[string]any{"items": bad})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "body.items[1].pwv_mm")
	r = call(t, http.MethodPost, u, admin, map[string]any{"items": []map[string]any{{"kind": "forecast", "time": now.Format(time.RFC3339), "pwv_mm": 1, "source": "m"}}})
	require.Equal(t, 422, r.Status)
	require.Contains(t, string(r.Body), "body.items[0].issued_at")
	many := make([]map[string]any, 1001)
	for i := range many {
		many[i] = one[0]
	}
	r = call(t, http.MethodPost, u, admin, map[string]any{"items": many})
	require.Equal(t, 422, r.Status)
	require.Contains(t, string(r.Body), "body.items")

	// GET: anonymous, pages of limit by cursor, every reading once, the PWV now
	type page struct {
		Items      []weather.Reading `json:"items"`
		NextCursor *string           `json:"next_cursor"`
		Now        weather.PWV       `json:"now"`
	}
	q := url.Values{"from": {now.Add(-6 * time.Hour).Format(time.RFC3339)}, "to": {now.Add(6 * time.Hour).Format(time.RFC3339)}, "limit": {"7"}}
	var all []weather.Reading
	var first page
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		r = call(t, http.MethodGet, u+"?"+q.Encode(), "", nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var p page
		require.NoError(t, json.Unmarshal(r.Body, &p))
		if pages == 0 {
			first = p
		}
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			break
		}
		q.Set("cursor", *p.NextCursor)
	}
	require.Len(t, all, 36)
	for i := 1; i < len(all); i++ {
		require.False(t, all[i].Time.Before(all[i-1].Time), "by time")
	}
	require.Equal(t, weather.KindMeasurement, first.Now.Kind)
	require.InDelta(t, 0.42, *first.Now.PWVmm, 1e-9, "the admin's re-post replaced the value at now")
	r = call(t, http.MethodGet, u+"?kind=forecast&from="+url.QueryEscape(now.Format(time.RFC3339)), "", nil)
	var fc page
	require.NoError(t, json.Unmarshal(r.Body, &fc))
	require.Len(t, fc.Items, 6)
	require.Equal(t, "forecast model", fc.Items[0].Source)
	require.Contains(t, string(call(t, http.MethodGet, u+"?from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z", "", nil).Body), "query.to")
	require.Contains(t, string(call(t, http.MethodGet, u+"?limit=5001", "", nil).Body), "limit")
	require.Contains(t, string(call(t, http.MethodGet, u+"?cursor=nonsense", "", nil).Body), "query.cursor")

	// the PWV at times as visibility will ask: measurement, forecast, unknown
	db, err := sqlx.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()
	store := &weather.Store{Read: db, Write: db}
	series, err := store.Load(t.Context(), now.Add(-2*time.Hour), now.Add(10*time.Hour), now)
	require.NoError(t, err)
	require.Equal(t, weather.KindMeasurement, series.At(now.Add(-25*time.Minute)).Kind)
	f := series.At(now.Add(90 * time.Minute))
	require.Equal(t, weather.KindForecast, f.Kind)
	require.InDelta(t, 1.15, *f.PWVmm, 1e-9)
	require.Equal(t, weather.KindUnknown, series.At(now.Add(8*time.Hour)).Kind)

	// retention: readings older than the cutoff go, in batches
	old := []map[string]any{}
	for i := range 5 {
		old = append(old, map[string]any{"kind": "measurement", "time": now.AddDate(0, 0, -500).Add(time.Duration(i) * time.Minute).Format(time.RFC3339), "pwv_mm": 1, "source": "radiometer"})
	}
	require.Equal(t, 200, call(t, http.MethodPost, u, admin, map[string]any{"items": old}).Status)
	n, err := store.Prune(t.Context(), now.AddDate(0, 0, -400), 2)
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	var left int
	require.NoError(t, db.Get(&left, `SELECT count(*) FROM site_weather`))
	require.Equal(t, 36, left, fmt.Sprint("the recent readings stay"))
}
