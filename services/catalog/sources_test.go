package catalog_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

type source struct {
	ID          int64    `json:"id"`
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	RADeg       *float64 `json:"ra_deg"`
	DecDeg      *float64 `json:"dec_deg"`
	Body        *string  `json:"body"`
	ObjectType  *string  `json:"object_type"`
	Aliases     []string `json:"aliases"`
	CoordOrigin string   `json:"coord_origin"`
	DistanceDeg *float64 `json:"distance_deg"`
}

type sourcePage struct {
	Items []source `json:"items"`
	Total int      `json:"total"`
}

func testSources(t *testing.T, e *env) {
	r := e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{
		"name": "W3(OH)", "kind": "fixed", "ra_deg": 36.7674, "dec_deg": 61.8738, "pm_ra_mas_yr": -1.2, "pm_dec_mas_yr": 0.5,
		"object_type": "HII region", "aliases": []string{"W 3 (OH)x", "G133.95+1.06"},
	})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var w3 source
	r.JSON(t, &w3)
	require.Equal(t, fmt.Sprintf("/sources/%d", w3.ID), r.Header.Get("Location"))
	require.Equal(t, []string{"W 3 (OH)x", "G133.95+1.06"}, w3.Aliases)
	require.Equal(t, "user", w3.CoordOrigin)
	require.Contains(t, string(r.Body), `"epoch":2000`, "proper motion without epoch: J2000")

	jup := e.createSource(t, map[string]any{"name": "Saturn test", "kind": "solar_system", "body": "saturn"})
	ce := e.createSource(t, map[string]any{"name": "CE test field", "kind": "constant_elevation", "elevation_deg": 50, "az_min_deg": 300, "az_max_deg": 60})

	// Names and aliases are unique over each other, ignoring case and spaces: 409 naming the field.
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "w3 (oh)", "kind": "fixed", "ra_deg": 1, "dec_deg": 1}), http.StatusConflict, "body.name")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "g133.95+1.06", "kind": "fixed", "ra_deg": 1, "dec_deg": 1}), http.StatusConflict, "body.name")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "Other", "kind": "fixed", "ra_deg": 1, "dec_deg": 1, "aliases": []string{"x", "W3(OH)"}}), http.StatusConflict, "body.aliases[1]")
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE name = 'Other'`).Scan(&n))
	require.Zero(t, n, "a refused source leaves nothing behind")

	// Search by any part of a name or alias, case and spaces ignored; by kind.
	for _, q := range []string{"w3(oh)", "W 3", "g133.95", "3 (OH)X"} {
		var page sourcePage
		e.call(t, http.MethodGet, e.gw("/sources/?q="+urlq(q)), e.viewer, nil).JSON(t, &page)
		require.Equal(t, 1, page.Total, "q=%s", q)
		require.Equal(t, w3.ID, page.Items[0].ID)
	}
	var page sourcePage
	e.call(t, http.MethodGet, e.gw("/sources/?kind=solar_system&q=saturn"), e.viewer, nil).JSON(t, &page)
	require.Equal(t, 1, page.Total)
	require.Equal(t, jup, page.Items[0].ID)
	require.Nil(t, page.Items[0].RADeg)

	// PUT replaces fields and aliases; the old alias is free again.
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", w3.ID)), e.observer, map[string]any{
		"name": "W3(OH)", "kind": "fixed", "ra_deg": 36.7675, "dec_deg": 61.8739, "aliases": []string{"W3 OH"},
	})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var w3b source
	r.JSON(t, &w3b)
	require.Equal(t, []string{"W3 OH"}, w3b.Aliases)
	require.Nil(t, w3b.ObjectType)
	e.createSource(t, map[string]any{"name": "G133.95+1.06", "kind": "fixed", "ra_deg": 36.7, "dec_deg": 61.8})
	// A PUT may change a kind; it must then give that kind's fields.
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", ce)), e.observer, map[string]any{"name": "CE test field", "kind": "fixed", "ra_deg": 3, "dec_deg": 4})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	requireProblem(t, e.call(t, http.MethodPut, e.gw("/sources/999999"), e.observer, map[string]any{"name": "x", "kind": "fixed", "ra_deg": 3, "dec_deg": 4}), http.StatusNotFound, "")

	// Create from the resolver: coordinates, type and aliases from the offline catalogue.
	r = e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "Betelgeuse", "resolve": true})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var bet source
	r.JSON(t, &bet)
	require.InDelta(t, 88.7929, *bet.RADeg, 1e-4)
	require.InDelta(t, 7.4071, *bet.DecDeg, 1e-4)
	require.Equal(t, "local_catalog", bet.CoordOrigin)
	require.Equal(t, "star", *bet.ObjectType)
	require.Subset(t, bet.Aliases, []string{"alf Ori", "58 Ori", "HD 39801", "HIP 27989"})
	// Now the database knows its aliases too: another source cannot take them.
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "HIP 27989", "kind": "fixed", "ra_deg": 1, "dec_deg": 1}), http.StatusConflict, "body.name")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "No Such Object 123", "resolve": true}), http.StatusUnprocessableEntity, "body.name")

	r = e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", bet.ID)), e.observer, nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	requireProblem(t, e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d", bet.ID)), e.viewer, nil), http.StatusNotFound, "")
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM source_aliases WHERE source_id = $1`, bet.ID).Scan(&n))
	require.Zero(t, n, "aliases go with their source")
}

func urlq(s string) string {
	return strings.NewReplacer(" ", "%20", "+", "%2B", "(", "%28", ")", "%29").Replace(s)
}

func testSourceValidation(t *testing.T, e *env) {
	post := func(b any) response { return e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, b) }
	for _, c := range []struct {
		name     string
		body     any
		location string
	}{
		{"ra 360", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 360, "dec_deg": 0}, "body.ra_deg"},
		{"ra negative", map[string]any{"name": "v", "kind": "fixed", "ra_deg": -0.1, "dec_deg": 0}, "body.ra_deg"},
		{"dec 90.1", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0, "dec_deg": 90.1}, "body.dec_deg"},
		{"fixed without dec", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0}, "body.dec_deg"},
		{"fixed with body", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0, "dec_deg": 0, "body": "moon"}, "body.body"},
		{"no kind", map[string]any{"name": "v", "ra_deg": 0, "dec_deg": 0}, "body.kind"},
		{"bad kind", map[string]any{"name": "v", "kind": "comet"}, "body.kind"},
		{"bad body", map[string]any{"name": "v", "kind": "solar_system", "body": "pluto"}, "body.body"},
		{"solar without body", map[string]any{"name": "v", "kind": "solar_system"}, "body.body"},
		{"solar with ra", map[string]any{"name": "v", "kind": "solar_system", "body": "mars", "ra_deg": 1}, "body.ra_deg"},
		{"const without az", map[string]any{"name": "v", "kind": "constant_elevation", "elevation_deg": 40, "az_min_deg": 10}, "body.az_max_deg"},
		{"const elevation 91", map[string]any{"name": "v", "kind": "constant_elevation", "elevation_deg": 91, "az_min_deg": 10, "az_max_deg": 20}, "body.elevation_deg"},
		{"name too long", map[string]any{"name": strings.Repeat("n", 256), "kind": "fixed", "ra_deg": 0, "dec_deg": 0}, "body.name"},
		{"blank name", map[string]any{"name": "  ", "kind": "fixed", "ra_deg": 0, "dec_deg": 0}, "body.name"},
		{"object type too long", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0, "dec_deg": 0, "object_type": strings.Repeat("t", 101)}, "body.object_type"},
		{"alias too long", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0, "dec_deg": 0, "aliases": []string{strings.Repeat("a", 256)}}, "body.aliases[0]"},
		{"unknown field", map[string]any{"name": "v", "kind": "fixed", "ra_deg": 0, "dec_deg": 0, "magnitude": 3}, "body.magnitude"},
		{"resolve with coordinates", map[string]any{"name": "Vega", "resolve": true, "ra_deg": 1}, "body.ra_deg"},
	} {
		t.Run(c.name, func(t *testing.T) { requireProblem(t, post(c.body), http.StatusUnprocessableEntity, c.location) })
	}
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE name IN ('v', 'Vega')`).Scan(&n))
	require.Zero(t, n)
}

func testDeleteUsedSource(t *testing.T, e *env) {
	src := e.createSource(t, map[string]any{"name": "Used source", "kind": "fixed", "ra_deg": 20.0, "dec_deg": 20.0})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("USES-SRC", unit("u", src, 11, 10)))
	require.Equal(t, http.StatusCreated, r.Status)
	var p program
	r.JSON(t, &p)
	prob := requireProblem(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", src)), e.observer, nil), http.StatusConflict, "")
	require.Contains(t, prob.Detail, "USES-SRC")
	require.Equal(t, http.StatusOK, e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d", src)), e.viewer, nil).Status)
	// Once the program no longer uses it, it can go.
	require.Equal(t, http.StatusOK, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, e.programBody("USES-SRC")).Status)
	require.Equal(t, http.StatusNoContent, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", src)), e.observer, nil).Status)
}

func testChipAndDetails(t *testing.T, e *env) {
	src := e.createSource(t, map[string]any{"name": "Chip target", "kind": "fixed", "ra_deg": 83.80875, "dec_deg": -5.375, "object_type": "HII region", "aliases": []string{"Chip alias"}})
	sun := e.createSource(t, map[string]any{"name": "Sun test", "kind": "solar_system", "body": "sun"})
	ce := e.createSource(t, map[string]any{"name": "Chip CE", "kind": "constant_elevation", "elevation_deg": 10, "az_min_deg": 0, "az_max_deg": 90})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("CHIP-P", unit("a", src, 11, 10), unit("b", src, 12, 10)))
	require.Equal(t, http.StatusCreated, r.Status)
	var p program
	r.JSON(t, &p)

	// The program's sources: program_id filter.
	var page sourcePage
	e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/?program_id=%d", p.ID)), e.viewer, nil).JSON(t, &page)
	require.Equal(t, 1, page.Total)
	require.Equal(t, src, page.Items[0].ID)
	require.Equal(t, http.StatusOK, e.call(t, http.MethodHead, e.gw(fmt.Sprintf("/sources/%d/chip", src)), e.viewer, nil).Status)

	r = e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d/chip", src)), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var chip struct {
		Name          string   `json:"name"`
		Kind          string   `json:"kind"`
		RAHMS         string   `json:"ra_hms"`
		DecDMS        string   `json:"dec_dms"`
		ObjectType    string   `json:"object_type"`
		AltDeg        *float64 `json:"alt_deg"`
		AzDeg         *float64 `json:"az_deg"`
		SunSepDeg     float64  `json:"sun_sep_deg"`
		ObservableNow *bool    `json:"observable_now"`
		At            time.Time
		Programs      []struct {
			ID        int64  `json:"id"`
			ShortName string `json:"short_name"`
		} `json:"programs"`
	}
	r.JSON(t, &chip)
	require.Equal(t, "Chip target", chip.Name)
	require.Equal(t, "05h35m14.10s", chip.RAHMS)
	require.Equal(t, "-05d22m30.0s", chip.DecDMS)
	require.Equal(t, "HII region", chip.ObjectType)
	require.NotNil(t, chip.AltDeg)
	require.True(t, *chip.AltDeg >= -90 && *chip.AltDeg <= 90)
	require.True(t, *chip.AzDeg >= 0 && *chip.AzDeg < 360)
	require.NotNil(t, chip.ObservableNow)
	require.Equal(t, *chip.AltDeg >= 20 && chip.SunSepDeg >= 45, *chip.ObservableNow, "observable_now follows the limits")
	require.Len(t, chip.Programs, 1, "one program, however many of its units use the source")
	require.Equal(t, "CHIP-P", chip.Programs[0].ShortName)

	// The Sun is never observable (Sun avoidance); a field at 10 degrees is below the limit.
	for _, id := range []int64{sun, ce} {
		r = e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d/chip", id)), e.viewer, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		chip.ObservableNow = nil
		r.JSON(t, &chip)
		require.False(t, *chip.ObservableNow, "%s", r.Body)
	}
	require.InDelta(t, 10, *chip.AltDeg, 1e-9)
	require.InDelta(t, 45, *chip.AzDeg, 1e-9)
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/sources/999999/chip"), e.viewer, nil), http.StatusNotFound, "")

	r = e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d/details", src)), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var det struct {
		Name       string   `json:"name"`
		Aliases    []string `json:"aliases"`
		Provenance string   `json:"provenance"`
		ObsUnits   []struct {
			Name    string `json:"name"`
			Program struct {
				ID        int64  `json:"id"`
				ShortName string `json:"short_name"`
			} `json:"program"`
		} `json:"obs_units"`
	}
	r.JSON(t, &det)
	require.Equal(t, []string{"Chip alias"}, det.Aliases)
	require.Contains(t, det.Provenance, "user")
	require.Len(t, det.ObsUnits, 2)
	require.Equal(t, p.ID, det.ObsUnits[0].Program.ID)
	require.Equal(t, "CHIP-P", det.ObsUnits[1].Program.ShortName)
}

// angDist is the great-circle distance in degrees (haversine).
func angDist(ra1, dec1, ra2, dec2 float64) float64 {
	r := math.Pi / 180
	s := math.Sin((dec2-dec1)*r/2)*math.Sin((dec2-dec1)*r/2) + math.Cos(dec1*r)*math.Cos(dec2*r)*math.Sin((ra2-ra1)*r/2)*math.Sin((ra2-ra1)*r/2)
	return 2 * math.Asin(math.Min(1, math.Sqrt(s))) / r
}

func testConeSearch(t *testing.T, e *env) {
	// Random sources over the whole sky, plus clusters at the edge cases, bulk-loaded.
	rng := rand.New(rand.NewPCG(11, 12))
	type pt struct{ ra, dec float64 }
	var pts []pt
	for range 20000 {
		pts = append(pts, pt{rng.Float64() * 360, math.Asin(2*rng.Float64()-1) * 180 / math.Pi})
	}
	for range 300 { // near RA 0/360, near both poles
		pts = append(pts, pt{math.Mod(360+rng.NormFloat64()*0.8, 360), rng.NormFloat64() * 0.8})
		pts = append(pts, pt{rng.Float64() * 360, 90 - math.Abs(rng.NormFloat64())*1.5})
		pts = append(pts, pt{rng.Float64() * 360, -90 + math.Abs(rng.NormFloat64())*1.5})
	}
	pts = append(pts, pt{0, 90}, pt{0, -90}, pt{359.9999999, 0}, pt{0, 0})
	ras, decs, names := make([]float64, len(pts)), make([]float64, len(pts)), make([]string, len(pts))
	for i, p := range pts {
		ras[i], decs[i], names[i] = p.ra, p.dec, fmt.Sprintf("cone-%06d", i)
	}
	_, err := e.db.Exec(`INSERT INTO sources (name, kind, ra_deg, dec_deg) SELECT n, 'fixed', r, d FROM unnest($1::text[], $2::float8[], $3::float8[]) AS x(n, r, d)`,
		pq.Array(names), pq.Array(ras), pq.Array(decs))
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO source_aliases (source_id, alias, is_name) SELECT id, name, true FROM sources WHERE name LIKE 'cone-%'`)
	require.NoError(t, err)
	// A cone answers each source's aliases (in the same statement as the page), in creation order.
	withAliases := e.createSource(t, map[string]any{"name": "cone aliased", "kind": "fixed", "ra_deg": 201.5, "dec_deg": -33.25,
		"aliases": []string{"cone alias b", "cone alias a"}})
	var near sourcePage
	r := e.call(t, http.MethodGet, e.gw("/sources/?ra_deg=201.5&dec_deg=-33.25&radius_deg=0.001"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &near)
	require.Len(t, near.Items, 1)
	require.Equal(t, withAliases, near.Items[0].ID)
	require.Equal(t, []string{"cone alias b", "cone alias a"}, near.Items[0].Aliases)
	require.Empty(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", withAliases)), e.observer, nil).Body)
	_, err = e.db.Exec(`ANALYZE sources`)
	require.NoError(t, err)

	var all []struct {
		id      int64
		ra, dec float64
	}
	rows, err := e.db.Query(`SELECT id, ra_deg, dec_deg FROM sources WHERE kind = 'fixed'`)
	require.NoError(t, err)
	for rows.Next() {
		var s struct {
			id      int64
			ra, dec float64
		}
		require.NoError(t, rows.Scan(&s.id, &s.ra, &s.dec))
		all = append(all, s)
	}
	require.NoError(t, rows.Err())

	for _, c := range []struct {
		name        string
		ra, dec, r  float64
		wantAtLeast int
	}{
		{"RA wrap from 359.8", 359.8, 0.1, 1.0, 20},
		{"RA wrap from 0.2", 0.2, -0.1, 1.0, 20},
		{"north pole", 0, 90, 2, 50},
		{"north pole off-centre", 180, 89.5, 1.5, 20},
		{"south pole", 123, -90, 2, 50},
		{"south pole off-centre", 270, -89.2, 1.2, 20},
		{"largest radius", 200, 30, 10, 50},
		{"tiny radius", 0, 0, 1e-6, 1},
		{"mid sky", 123.4, -45.6, 3, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want []int64
			for _, s := range all {
				// Brute force; points within 1e-9 degrees of the edge are left out of the comparison.
				if d := angDist(c.ra, c.dec, s.ra, s.dec); d <= c.r-1e-9 {
					want = append(want, s.id)
				}
			}
			require.GreaterOrEqual(t, len(want), c.wantAtLeast, "the random data covers this case")
			var got []source
			total := -1
			for offset := 0; ; offset += 500 {
				var page sourcePage
				url := fmt.Sprintf("/sources/?ra_deg=%v&dec_deg=%v&radius_deg=%v&limit=500&offset=%d", c.ra, c.dec, c.r, offset)
				r := e.call(t, http.MethodGet, e.gw(url), e.viewer, nil)
				require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
				r.JSON(t, &page)
				total = page.Total
				got = append(got, page.Items...)
				if len(page.Items) < 500 {
					break
				}
			}
			require.Equal(t, len(got), total)
			// Past the end: no items, the same total (the count-only path of the cone statement).
			var past sourcePage
			r := e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/?ra_deg=%v&dec_deg=%v&radius_deg=%v&limit=10&offset=%d", c.ra, c.dec, c.r, total+5)), e.viewer, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			r.JSON(t, &past)
			require.Empty(t, past.Items)
			require.Equal(t, total, past.Total)
			// With another filter the cone takes the general query: the same answer.
			var filtered sourcePage
			r = e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/?ra_deg=%v&dec_deg=%v&radius_deg=%v&kind=fixed&limit=500", c.ra, c.dec, c.r)), e.viewer, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			r.JSON(t, &filtered)
			require.Equal(t, total, filtered.Total)
			for i := range min(len(filtered.Items), len(got)) {
				require.Equal(t, got[i].ID, filtered.Items[i].ID, "same order (distance, then id)")
			}
			var gotIDs []int64
			prev := -1.0
			for _, s := range got {
				require.NotNil(t, s.DistanceDeg)
				require.GreaterOrEqual(t, *s.DistanceDeg, prev, "sorted by distance")
				prev = *s.DistanceDeg
				require.InDelta(t, angDist(c.ra, c.dec, *s.RADeg, *s.DecDeg), *s.DistanceDeg, 1e-7)
				require.LessOrEqual(t, *s.DistanceDeg, c.r+1e-9)
				if *s.DistanceDeg <= c.r-1e-9 {
					gotIDs = append(gotIDs, s.ID)
				}
			}
			sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
			sort.Slice(gotIDs, func(i, j int) bool { return gotIDs[i] < gotIDs[j] })
			require.Equal(t, want, gotIDs)
		})
	}

	// The query uses the q3c index.
	var plan string
	rows, err = e.db.Query(`EXPLAIN SELECT id FROM sources WHERE q3c_radial_query(ra_deg, dec_deg, 10, 10, 1)`)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan += line + "\n"
	}
	require.Contains(t, plan, "sources_q3c")

	// Limits: 422 naming the parameter.
	for _, c := range []struct{ query, location string }{
		{"ra_deg=360&dec_deg=0&radius_deg=1", "query.ra_deg"},
		{"ra_deg=-1&dec_deg=0&radius_deg=1", "query.ra_deg"},
		{"ra_deg=10&dec_deg=90.5&radius_deg=1", "query.dec_deg"},
		{"ra_deg=10&dec_deg=-91&radius_deg=1", "query.dec_deg"},
		{"ra_deg=10&dec_deg=0&radius_deg=0", "query.radius_deg"},
		{"ra_deg=10&dec_deg=0&radius_deg=-2", "query.radius_deg"},
		{"ra_deg=10&dec_deg=0&radius_deg=10.001", "query.radius_deg"},
		{"ra_deg=abc&dec_deg=0&radius_deg=1", "query.ra_deg"},
		{"ra_deg=10&dec_deg=0", "query.radius_deg"},
		{"ra_deg=NaN&dec_deg=0&radius_deg=1", "query.ra_deg"},
	} {
		requireProblem(t, e.call(t, http.MethodGet, e.gw("/sources/?"+c.query), e.viewer, nil), http.StatusUnprocessableEntity, c.location)
	}
	var page sourcePage
	r = e.call(t, http.MethodGet, e.gw("/sources/?ra_deg=10&dec_deg=0&radius_deg=10"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "radius 10 is allowed: %s", r.Body)
	r.JSON(t, &page)
	require.Positive(t, page.Total)
}
