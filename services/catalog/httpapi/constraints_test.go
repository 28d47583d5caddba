package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// unitConstraints is an obs unit's constraints as the API gives them.
type unitConstraints struct {
	MinElevationDeg      *float64 `json:"min_elevation_deg"`
	MaxAirmass           *float64 `json:"max_airmass"`
	MinMoonSeparationDeg *float64 `json:"min_moon_separation_deg"`
	MinSunSeparationDeg  *float64 `json:"min_sun_separation_deg"`
	MaxPWVmm             *float64 `json:"max_pwv_mm"`
	LSTRange             *struct {
		StartHours float64 `json:"start_hours"`
		EndHours   float64 `json:"end_hours"`
	} `json:"lst_range"`
	TimeWindows []struct {
		Start time.Time `json:"start"`
		End   time.Time `json:"end"`
	} `json:"time_windows"`
}

type constrainedProgram struct {
	ID       int64 `json:"id"`
	ObsUnits []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
		unitConstraints
	} `json:"obs_units"`
}

type constrainedVis struct {
	SunAvoidanceDeg float64    `json:"sun_avoidance_deg"`
	MinElevationDeg float64    `json:"min_elevation_deg"`
	PWVAsOf         *time.Time `json:"pwv_as_of"`
	ObsUnit         *struct {
		ID int64 `json:"id"`
		unitConstraints
	} `json:"obs_unit"`
	Windows []struct {
		Start       time.Time `json:"start"`
		End         time.Time `json:"end"`
		StartReason string    `json:"start_reason"`
		EndReason   string    `json:"end_reason"`
		PWV         []struct {
			Start time.Time `json:"start"`
			End   time.Time `json:"end"`
			Basis string    `json:"basis"`
		} `json:"pwv"`
		Unknown []string `json:"unknown_constraints"`
	} `json:"windows"`
}

// TestObsUnitConstraints: an obs unit's constraints are stored and given back by POST, PUT and
// PATCH; each bad value is a 422 naming the field (by the schema on POST/PUT, by the domain rule on
// PATCH) and a row written directly is refused by the database; GET /visibility/{id}?obs_unit_id=
// applies them, PWV from measurements, the forecast or neither.
func TestObsUnitConstraints(t *testing.T) {
	e := startVis(t, nil)
	// β Hyi: circumpolar here (10°–36°), always far from the Sun: with a 5° limit always observable
	hyi := e.source(t, "beta Hyi", "fixed", map[string]any{"ra_deg": 6.43779233, "dec_deg": -77.25424612})
	other := e.source(t, "other", "fixed", map[string]any{"ra_deg": 100.0, "dec_deg": -20.0})
	var module int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM instrument_modules ORDER BY id LIMIT 1`).Scan(&module))
	post := func(t *testing.T, method, path string, body any) reply {
		t.Helper()
		return e.do(t, method, e.base, path, e.admin, "", body)
	}
	unit := func(name string, extra map[string]any) map[string]any {
		u := map[string]any{"name": name, "source_id": hyi, "instrument_module_id": module, "duration_s": 600}
		for k, v := range extra {
			u[k] = v
		}
		return u
	}
	all := map[string]any{"min_elevation_deg": 5, "max_airmass": 4.5, "min_moon_separation_deg": 20, "min_sun_separation_deg": 50,
		"max_pwv_mm": 1.0, "lst_range": map[string]any{"start_hours": 22, "end_hours": 2},
		"time_windows": []map[string]any{{"start": "2026-05-10T12:00:00Z", "end": "2026-05-10T13:30:00Z"}, {"start": "2026-05-11T00:00:00+02:00", "end": "2026-05-12T00:00:00Z"}}}
	r := post(t, http.MethodPost, "/observing_program/", map[string]any{"short_name": "CONS-1", "title": "Constraints", "pi": "P. I.",
		"obs_units": []map[string]any{unit("all", all), unit("none", nil)}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var p constrainedProgram
	require.NoError(t, json.Unmarshal(r.body, &p))

	check := func(t *testing.T, p constrainedProgram) {
		t.Helper()
		require.Len(t, p.ObsUnits, 2)
		a := p.ObsUnits[0].unitConstraints
		require.Equal(t, 4.5, *a.MaxAirmass)
		require.Equal(t, 20.0, *a.MinMoonSeparationDeg)
		require.Equal(t, 50.0, *a.MinSunSeparationDeg)
		require.Equal(t, 1.0, *a.MaxPWVmm)
		require.Equal(t, 22.0, a.LSTRange.StartHours)
		require.Equal(t, 2.0, a.LSTRange.EndHours)
		require.Len(t, a.TimeWindows, 2)
		require.True(t, a.TimeWindows[0].Start.Equal(time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)))
		require.True(t, a.TimeWindows[1].Start.Equal(time.Date(2026, 5, 10, 22, 0, 0, 0, time.UTC)), "offsets kept as instants")
		require.Equal(t, unitConstraints{}, p.ObsUnits[1].unitConstraints)
	}
	check(t, p)
	var got constrainedProgram
	require.Equal(t, 200, e.get(t, fmt.Sprintf("/observing_program/%d", p.ID), &got).status)
	check(t, got)

	t.Run("PUTAndPATCH", func(t *testing.T) {
		put := map[string]any{"short_name": "CONS-1", "title": "Constraints", "pi": "P. I.", "status": "draft",
			"obs_units": []map[string]any{unit("all", all), unit("none", map[string]any{"max_airmass": 2})}}
		r := post(t, http.MethodPut, fmt.Sprintf("/observing_program/%d", p.ID), put)
		require.Equal(t, 200, r.status, string(r.body))
		q := decodeProgram(t, r)
		require.Equal(t, 2.0, *q.ObsUnits[1].MaxAirmass)
		// a merge patch replaces the list; the units keep what they carry
		r = e.do(t, http.MethodPatch, e.base, fmt.Sprintf("/observing_program/%d", p.ID), e.admin, "", map[string]any{"title": "Constraints 2"})
		q = decodeProgram(t, r)
		require.Equal(t, 2.0, *q.ObsUnits[1].MaxAirmass)
		require.Len(t, q.ObsUnits[0].TimeWindows, 2)
		r = e.do(t, http.MethodPatch, e.base, fmt.Sprintf("/observing_program/%d", p.ID), e.admin, "",
			map[string]any{"obs_units": []map[string]any{unit("all", all), unit("none", nil)}})
		check(t, decodeProgram(t, r))
	})

	t.Run("Validation", func(t *testing.T) {
		cases := []struct {
			field string
			value any
			loc   string
		}{
			{"max_airmass", 0.9, "max_airmass"},
			{"max_airmass", 41, "max_airmass"},
			{"min_moon_separation_deg", -1, "min_moon_separation_deg"},
			{"min_moon_separation_deg", 181, "min_moon_separation_deg"},
			{"min_sun_separation_deg", 200, "min_sun_separation_deg"},
			{"max_pwv_mm", 0, "max_pwv_mm"},
			{"max_pwv_mm", 51, "max_pwv_mm"},
			{"lst_range", map[string]any{"start_hours": 24, "end_hours": 2}, "lst_range.start_hours"},
			{"lst_range", map[string]any{"start_hours": 2, "end_hours": -1}, "lst_range.end_hours"},
			{"lst_range", map[string]any{"start_hours": 2, "end_hours": 2}, "lst_range.end_hours"},
			{"time_windows", []map[string]any{{"start": "2026-05-10T03:00:00Z", "end": "2026-05-10T01:00:00Z"}}, "time_windows[0].end"},
			{"time_windows", []map[string]any{{"start": "2026-05-10T01:00:00Z", "end": "2026-05-10T03:00:00Z"},
				{"start": "2026-05-10T02:00:00Z", "end": "2026-05-10T04:00:00Z"}}, "time_windows[1].start"},
			{"time_windows", []map[string]any{{"start": "2026-05-10T01:00:00Z", "end": "2026-05-10T03:00:00Z"},
				{"start": "2026-05-10T03:00:00Z", "end": "2026-05-10T04:00:00Z"}}, "time_windows[1].start"},
		}
		for _, c := range cases {
			units := []map[string]any{unit("ok", nil), unit("bad", map[string]any{c.field: c.value})}
			loc := "body.obs_units[1]." + c.loc
			// POST: the schema or the domain rule, whichever sees it first
			r := post(t, http.MethodPost, "/observing_program/", map[string]any{"short_name": "CONS-BAD", "title": "Bad", "pi": "P. I.", "obs_units": units})
			requireProblem(t, r, 422, loc)
			// PATCH: the merged program goes through the domain rule alone
			r = e.do(t, http.MethodPatch, e.base, fmt.Sprintf("/observing_program/%d", p.ID), e.admin, "", map[string]any{"obs_units": units})
			requireProblem(t, r, 422, loc)
		}
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM observing_programs WHERE short_name = 'CONS-BAD'`).Scan(&n))
		require.Zero(t, n, "no partial write")
	})

	t.Run("DatabaseRefusesBadRows", func(t *testing.T) {
		for col, v := range map[string]string{
			"max_airmass": "0.5", "min_moon_separation_deg": "190", "min_sun_separation_deg": "-1", "max_pwv_mm": "0",
			"lst_start_hours": "24", "time_windows": "'{[2026-05-10T01:00:00Z,)}'::tstzmultirange",
		} {
			_, err := e.db.Exec(fmt.Sprintf(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, %s) VALUES ($1, 'db-bad', $2, $3, 60, %s)`, col, v), p.ID, hyi, module)
			var pe *pq.Error
			require.ErrorAs(t, err, &pe, col)
			require.Equal(t, "23514", string(pe.Code), "%s: check_violation, got %v", col, err)
		}
		_, err := e.db.Exec(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, lst_start_hours, lst_end_hours) VALUES ($1, 'db-bad', $2, $3, 60, 3, 3)`, p.ID, hyi, module)
		require.ErrorContains(t, err, "obs_units_lst_range")
		_, err = e.db.Exec(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, lst_start_hours) VALUES ($1, 'db-bad', $2, $3, 60, 3)`, p.ID, hyi, module)
		require.ErrorContains(t, err, "obs_units_lst_range")
		_, err = e.db.Exec(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, time_windows) VALUES ($1, 'db-bad', $2, $3, 60, '{}')`, p.ID, hyi, module)
		require.ErrorContains(t, err, "obs_units_time_windows")
		_, err = e.db.Exec(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, time_windows) VALUES ($1, 'db-bad', $2, $3, 60, '{[2026-05-10T03:00:00Z,2026-05-10T01:00:00Z)}')`, p.ID, hyi, module)
		require.Error(t, err, "a reversed window")
	})

	allID, noneID := p.ObsUnits[0].ID, p.ObsUnits[1].ID
	t.Run("Visibility", func(t *testing.T) {
		var v constrainedVis
		r := e.get(t, fmt.Sprintf("/visibility/%d?start=2026-05-10T00:00:00Z&end=2026-05-12T00:00:00Z&step_s=600&obs_unit_id=%d", hyi, allID), &v)
		require.Equal(t, 200, r.status, string(r.body))
		require.Equal(t, allID, v.ObsUnit.ID)
		require.Equal(t, 50.0, v.SunAvoidanceDeg, "the unit's Sun separation replaces the site's")
		require.Equal(t, 5.0, v.MinElevationDeg)
		require.NotNil(t, v.PWVAsOf)
		// the LST range (22 h → 2 h: about 11:20 to 15:20 UTC) within the time windows; no PWV data
		// for 2026: flagged unknown
		require.NotEmpty(t, v.Windows)
		reasons := map[string]bool{}
		for _, w := range v.Windows {
			reasons[w.StartReason], reasons[w.EndReason] = true, true
			require.Equal(t, []string{"max_pwv_mm"}, w.Unknown)
			require.Len(t, w.PWV, 1)
			require.Equal(t, "unknown", w.PWV[0].Basis)
		}
		for _, want := range []string{"outside_time_window", "lst_range_start", "lst_range_end"} {
			require.True(t, reasons[want], "reason %s in %v", want, reasons)
		}
		require.True(t, v.Windows[0].Start.Equal(time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)), "%+v", v.Windows[0])
		require.True(t, v.Windows[0].End.Equal(time.Date(2026, 5, 10, 13, 30, 0, 0, time.UTC)), "%+v", v.Windows[0])
		require.Equal(t, "outside_time_window", v.Windows[0].StartReason)
		require.Equal(t, "outside_time_window", v.Windows[0].EndReason)
		require.Len(t, v.Windows, 2, "the time window's LST range of 11 May")

		// the query's min_elevation_deg still overrides the unit's
		var over constrainedVis
		require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/%d?start=2026-05-11T00:00:00Z&end=2026-05-12T00:00:00Z&obs_unit_id=%d&min_elevation_deg=12", hyi, allID), &over).status)
		require.Equal(t, 12.0, over.MinElevationDeg)

		// without the unit: the site's limits only
		var plain constrainedVis
		require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/%d?start=2026-05-10T00:00:00Z&end=2026-05-12T00:00:00Z&step_s=600", hyi), &plain).status)
		require.Nil(t, plain.ObsUnit)
		require.Nil(t, plain.PWVAsOf)
		require.Equal(t, 20.0, plain.MinElevationDeg)

		requireProblem(t, e.get(t, fmt.Sprintf("/visibility/%d?obs_unit_id=%d", other, allID), nil), 422, "query.obs_unit_id")
		requireProblem(t, e.get(t, fmt.Sprintf("/visibility/%d?obs_unit_id=999999", hyi), nil), 422, "query.obs_unit_id")
		// the night plot shades the unit's windows: its source's label says so, and the image differs
		plot := func(q string) reply {
			return e.do(t, http.MethodGet, e.base, "/visibility/plot?start=2026-05-11T00:00:00Z&end=2026-05-12T00:00:00Z&format=svg"+q, e.user, "", nil)
		}
		with, without := plot(fmt.Sprintf("&source_id=%d&source_id=%d&obs_unit_id=%d", other, hyi, allID)), plot(fmt.Sprintf("&source_id=%d&source_id=%d", other, hyi))
		require.Equal(t, 200, with.status, string(with.body))
		require.Contains(t, string(with.body), "obs unit all")
		require.Contains(t, string(with.body), `data-reasons="lst_range_start lst_range_end"`)
		require.NotContains(t, string(without.body), "obs unit all")
		require.NotContains(t, string(without.body), "lst_range_start")
		requireProblem(t, plot(fmt.Sprintf("&source_id=%d&obs_unit_id=%d", other, allID)), 422, "query.obs_unit_id")
		svg := e.do(t, http.MethodGet, e.base, fmt.Sprintf("/visibility/%d?start=2026-05-11T00:00:00Z&end=2026-05-12T00:00:00Z&format=svg&obs_unit_id=%d", hyi, allID), e.user, "", nil)
		require.Equal(t, 200, svg.status, string(svg.body))
		require.Contains(t, string(svg.body), "obs unit all")
		require.Contains(t, string(svg.body), "lst_range_start")

		var none constrainedVis
		require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/%d?obs_unit_id=%d", hyi, noneID), &none).status)
		require.Nil(t, none.PWVAsOf, "no PWV limit: no weather read")
	})

	t.Run("PWV", func(t *testing.T) {
		// measurements every 5 min for the past 3 h (0.5 mm, but 2 mm from 2 h to 1.5 h ago), a forecast
		// issued an hour ago hourly for the next 4 h (0.5 mm), then nothing
		now := time.Now().UTC().Truncate(time.Minute)
		for m := -180; m <= 0; m += 5 {
			v := 0.5
			if m >= -120 && m < -90 {
				v = 2
			}
			_, err := e.db.Exec(`INSERT INTO site_weather (kind, at, pwv_mm, source) VALUES ('measurement', $1, $2, 'radiometer')`, now.Add(time.Duration(m)*time.Minute), v)
			require.NoError(t, err)
		}
		for h := 0; h <= 4; h++ {
			_, err := e.db.Exec(`INSERT INTO site_weather (kind, at, pwv_mm, source, issued_at) VALUES ('forecast', $1, 0.5, 'model', $2)`, now.Add(time.Duration(h)*time.Hour), now.Add(-time.Hour))
			require.NoError(t, err)
		}
		// Only the PWV limit may end a window here: β Hyi's altitude (10°–36°) crosses the airmass
		// limit (4.5, about 12.7°) once a day, at an hour that depends on when the test runs.
		_, err := e.db.Exec(`UPDATE obs_units SET lst_start_hours = NULL, lst_end_hours = NULL, time_windows = NULL, max_airmass = NULL WHERE id = $1`, allID)
		require.NoError(t, err)
		start, end := now.Add(-4*time.Hour), now.Add(6*time.Hour)
		var v constrainedVis
		r := e.get(t, fmt.Sprintf("/visibility/%d?start=%s&end=%s&step_s=600&obs_unit_id=%d", hyi, start.Format(time.RFC3339), end.Format(time.RFC3339), allID), &v)
		require.Equal(t, 200, r.status, string(r.body))
		require.Len(t, v.Windows, 2, "%s", r.body)
		w0, w1 := v.Windows[0], v.Windows[1]
		require.Equal(t, "range_start", w0.StartReason)
		require.Equal(t, "pwv_above_limit", w0.EndReason)
		require.WithinDuration(t, now.Add(-2*time.Hour), w0.End, time.Second)
		require.Equal(t, "pwv_above_limit", w1.StartReason)
		require.WithinDuration(t, now.Add(-90*time.Minute), w1.Start, time.Second)
		basis := func(w int) []string {
			var b []string
			for _, s := range v.Windows[w].PWV {
				b = append(b, s.Basis)
			}
			return b
		}
		require.Equal(t, []string{"unknown", "measurement"}, basis(0), "no data before the first measurement")
		require.Equal(t, []string{"measurement", "forecast", "unknown"}, basis(1))
		require.WithinDuration(t, *v.PWVAsOf, v.Windows[1].PWV[0].End, time.Millisecond, "measured up to now, forecast after")
		require.True(t, slices.Equal(w1.Unknown, []string{"max_pwv_mm"}))
	})
}

// decodeProgram reads a 200 answer into a fresh program (json.Unmarshal into a used one would keep
// the old elements' fields that the new answer leaves out).
func decodeProgram(t *testing.T, r reply) constrainedProgram {
	t.Helper()
	require.Equal(t, 200, r.status, string(r.body))
	var p constrainedProgram
	require.NoError(t, json.Unmarshal(r.body, &p))
	return p
}
