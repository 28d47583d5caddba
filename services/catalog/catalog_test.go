package catalog_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type obsUnit struct {
	ID                 int64    `json:"id"`
	Name               string   `json:"name"`
	SourceID           int64    `json:"source_id"`
	InstrumentModuleID int      `json:"instrument_module_id"`
	DurationS          float64  `json:"duration_s"`
	MinElevationDeg    *float64 `json:"min_elevation_deg"`
	Priority           *int     `json:"priority"`
}

type program struct {
	ID             int64     `json:"id"`
	ShortName      string    `json:"short_name"`
	Title          string    `json:"title"`
	PI             string    `json:"pi"`
	Status         string    `json:"status"`
	AllocatedHours *float64  `json:"allocated_hours"`
	ObsUnits       []obsUnit `json:"obs_units"`
}

type programPage struct {
	Items  []program `json:"items"`
	Total  int       `json:"total"`
	Limit  int       `json:"limit"`
	Offset int       `json:"offset"`
}

// TestCatalog runs the catalog's behaviour against one real suite (authtoken, catalog, gateway;
// PostgreSQL with q3c; Redis) and a fake Sesame.
func TestCatalog(t *testing.T) {
	sesame := newFakeSesame(t)
	e := startEnv(t, map[string]string{"OPS_SESAME_URL": sesame.URL(), "OPS_SESAME_TIMEOUT": "500ms"})
	t.Run("Instruments", func(t *testing.T) { testInstruments(t, e) })
	t.Run("ProgramCRUD", func(t *testing.T) { testProgramCRUD(t, e) })
	t.Run("ProgramValidation", func(t *testing.T) { testProgramValidation(t, e) })
	t.Run("ObsUnitReplacementKeepsIDs", func(t *testing.T) { testObsUnitReplacement(t, e) })
	t.Run("Permissions", func(t *testing.T) { testPermissions(t, e) })
	t.Run("Sources", func(t *testing.T) { testSources(t, e) })
	t.Run("SourceValidation", func(t *testing.T) { testSourceValidation(t, e) })
	t.Run("DeleteUsedSource", func(t *testing.T) { testDeleteUsedSource(t, e) })
	t.Run("ProgramWithExecutedObservations", func(t *testing.T) { testExecutedObservationsBlockDeletes(t, e) })
	t.Run("ChipAndDetails", func(t *testing.T) { testChipAndDetails(t, e) })
	t.Run("ConeSearch", func(t *testing.T) { testConeSearch(t, e) })
	t.Run("Resolve", func(t *testing.T) { testResolve(t, e) })
	t.Run("Sesame", func(t *testing.T) { testSesame(t, e, sesame) })
	t.Run("SeedDemo", func(t *testing.T) { testSeedDemo(t, e) })
}

func testInstruments(t *testing.T, e *env) {
	r := e.call(t, http.MethodGet, e.gw("/instruments/"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var page struct {
		Items []struct {
			ID      int    `json:"id"`
			Name    string `json:"name"`
			Modules []struct {
				ID     int            `json:"id"`
				Name   string         `json:"name"`
				Config map[string]any `json:"config"`
			} `json:"modules"`
		} `json:"items"`
		Total int `json:"total"`
	}
	r.JSON(t, &page)
	require.Equal(t, 3, page.Total)
	got := map[string][]string{}
	for _, in := range page.Items {
		for _, m := range in.Modules {
			got[in.Name] = append(got[in.Name], fmt.Sprintf("%d %s", m.ID, m.Name))
			require.NotEmpty(t, m.Config, "module %d has a configuration", m.ID)
		}
	}
	require.Equal(t, map[string][]string{
		"Prime-Cam": {"11 280 GHz", "12 350 GHz", "13 850 GHz", "14 EoR-Spec"},
		"Mod-Cam":   {"21 280 GHz"},
		"CHAI":      {"31 LFA", "32 HFA"},
	}, got)

	r = e.call(t, http.MethodGet, e.gw("/instruments/3"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"CHAI"`)
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/instruments/99"), e.viewer, nil), http.StatusNotFound, "")
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/instruments/x"), e.viewer, nil), http.StatusUnprocessableEntity, "path.id")
}

func (e *env) programBody(short string, units ...map[string]any) map[string]any {
	if units == nil {
		units = []map[string]any{}
	}
	return map[string]any{"short_name": short, "title": "Title of " + short, "pi": "P. Investigator", "status": "active",
		"allocated_hours": 12.5, "obs_units": units}
}

func unit(name string, source int64, module int, duration float64) map[string]any {
	return map[string]any{"name": name, "source_id": source, "instrument_module_id": module, "duration_s": duration}
}

func testProgramCRUD(t *testing.T, e *env) {
	src := e.createSource(t, map[string]any{"name": "CRUD target", "kind": "fixed", "ra_deg": 10.0, "dec_deg": -20.0})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer,
		e.programBody("CRUD-1", unit("u1", src, 11, 600), unit("u2", src, 31, 1200)))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p program
	r.JSON(t, &p)
	require.Positive(t, p.ID)
	require.Equal(t, fmt.Sprintf("/observing_program/%d", p.ID), r.Header.Get("Location"))
	require.Len(t, p.ObsUnits, 2)
	require.Equal(t, "u1", p.ObsUnits[0].Name)
	require.Equal(t, 31, p.ObsUnits[1].InstrumentModuleID)

	r = e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status)
	var got program
	r.JSON(t, &got)
	require.Equal(t, p, got)

	// 409 naming short_name.
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("CRUD-1")), http.StatusConflict, "body.short_name")

	// List: filters, q, sort by short name, pagination.
	for _, sn := range []string{"CRUD-3", "CRUD-2"} {
		b := e.programBody(sn)
		b["status"] = "draft"
		b["pi"] = "Someone Else"
		require.Equal(t, http.StatusCreated, e.call(t, http.MethodPost, e.gw("/observing_program/"), e.admin, b).Status)
	}
	var page programPage
	r = e.call(t, http.MethodGet, e.gw("/observing_program/?q=crud&limit=2"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &page)
	require.Equal(t, 3, page.Total)
	require.Equal(t, 2, page.Limit)
	require.Equal(t, []string{"CRUD-1", "CRUD-2"}, []string{page.Items[0].ShortName, page.Items[1].ShortName})
	page = programPage{}
	e.call(t, http.MethodGet, e.gw("/observing_program/?q=crud&limit=2&offset=2"), e.viewer, nil).JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, "CRUD-3", page.Items[0].ShortName)
	page = programPage{}
	e.call(t, http.MethodGet, e.gw("/observing_program/?status=draft&pi=someone%20else"), e.viewer, nil).JSON(t, &page)
	require.Equal(t, 2, page.Total)
	page = programPage{}
	e.call(t, http.MethodGet, e.gw("/observing_program/?q=Title%20of%20CRUD-1"), e.viewer, nil).JSON(t, &page)
	require.Equal(t, 1, page.Total)
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/observing_program/?limit=501"), e.viewer, nil), http.StatusUnprocessableEntity, "query.limit")
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/observing_program/?status=done"), e.viewer, nil), http.StatusUnprocessableEntity, "query.status")

	// PUT replaces; DELETE 204 then 404.
	b := e.programBody("CRUD-1b", unit("u1", src, 11, 900))
	b["status"] = "completed"
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, b)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	got = program{}
	r.JSON(t, &got)
	require.Equal(t, "CRUD-1b", got.ShortName)
	require.Equal(t, "completed", got.Status)
	require.Len(t, got.ObsUnits, 1)
	require.Equal(t, p.ObsUnits[0].ID, got.ObsUnits[0].ID)
	require.Equal(t, 900.0, got.ObsUnits[0].DurationS)
	requireProblem(t, e.call(t, http.MethodPut, e.gw("/observing_program/999999"), e.observer, b), http.StatusNotFound, "")
	// PUT to a taken short name: 409, nothing changed.
	b2 := e.programBody("CRUD-2")
	requireProblem(t, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, b2), http.StatusConflict, "body.short_name")

	r = e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	requireProblem(t, e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.viewer, nil), http.StatusNotFound, "")
	requireProblem(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, nil), http.StatusNotFound, "")
	var units int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM obs_units WHERE program_id = $1`, p.ID).Scan(&units))
	require.Zero(t, units, "obs units go with their program")
}

func testProgramValidation(t *testing.T, e *env) {
	src := e.createSource(t, map[string]any{"name": "Validation target", "kind": "fixed", "ra_deg": 1.0, "dec_deg": 2.0})
	post := func(b any) response { return e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, b) }
	cases := []struct {
		name     string
		body     any
		location string
	}{
		{"missing title", map[string]any{"short_name": "V1", "pi": "x"}, "body"}, // "expected required property title to be present"
		{"bad status", map[string]any{"short_name": "V1", "title": "t", "pi": "x", "status": "done"}, "body.status"},
		{"negative hours", map[string]any{"short_name": "V1", "title": "t", "pi": "x", "allocated_hours": -1}, "body.allocated_hours"},
		{"unknown field", map[string]any{"short_name": "V1", "title": "t", "pi": "x", "colour": "red"}, "body.colour"},
		{"short name too long", map[string]any{"short_name": strings.Repeat("x", 65), "title": "t", "pi": "x"}, "body.short_name"},
		{"short name characters", map[string]any{"short_name": "a b", "title": "t", "pi": "x"}, "body.short_name"},
		{"title too long", map[string]any{"short_name": "V1", "title": strings.Repeat("x", 501), "pi": "x"}, "body.title"},
		{"blank pi", map[string]any{"short_name": "V1", "title": "t", "pi": "   "}, "body.pi"},
		{"unknown source", e.programBody("V1", unit("a", src, 11, 10), unit("b", 987654, 11, 10)), "body.obs_units[1].source_id"},
		{"unknown module", e.programBody("V1", unit("a", src, 15, 10)), "body.obs_units[0].instrument_module_id"},
		{"zero duration", e.programBody("V1", unit("a", src, 11, 0)), "body.obs_units[0].duration_s"},
		{"duplicate unit names", e.programBody("V1", unit("a", src, 11, 10), unit("a", src, 12, 10)), "body.obs_units[1].name"},
		{"elevation above 90", e.programBody("V1", map[string]any{"name": "a", "source_id": src, "instrument_module_id": 11, "duration_s": 1, "min_elevation_deg": 91}), "body.obs_units[0].min_elevation_deg"},
		{"unit unknown field", e.programBody("V1", map[string]any{"name": "a", "source_id": src, "instrument_module_id": 11, "duration_s": 1, "x": 1}), "body.obs_units[0].x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireProblem(t, post(c.body), http.StatusUnprocessableEntity, c.location)
		})
	}
	requireProblem(t, post(`{"short_name": "V1", "title": `), http.StatusBadRequest, "") // malformed JSON
	// Nothing of the refused programs was written.
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM observing_programs WHERE short_name = 'V1'`).Scan(&n))
	require.Zero(t, n)
}

func testObsUnitReplacement(t *testing.T, e *env) {
	a := e.createSource(t, map[string]any{"name": "Replace A", "kind": "fixed", "ra_deg": 5.0, "dec_deg": 5.0})
	b := e.createSource(t, map[string]any{"name": "Replace B", "kind": "fixed", "ra_deg": 6.0, "dec_deg": 6.0})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer,
		e.programBody("REPL", unit("keep", a, 11, 100), unit("change", a, 12, 100), unit("drop", a, 13, 100)))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p program
	r.JSON(t, &p)
	ids := map[string]int64{}
	for _, u := range p.ObsUnits {
		ids[u.Name] = u.ID
	}
	changed := unit("change", b, 31, 250)
	changed["priority"] = 3
	changed["min_elevation_deg"] = 35
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer,
		e.programBody("REPL", unit("new", b, 32, 50), changed, unit("keep", a, 11, 100)))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got program
	r.JSON(t, &got)
	byName := map[string]obsUnit{}
	for _, u := range got.ObsUnits {
		byName[u.Name] = u
	}
	require.Len(t, byName, 3)
	require.Equal(t, ids["keep"], byName["keep"].ID, "matched by name: id kept")
	require.Equal(t, ids["change"], byName["change"].ID, "matched by name: id kept while its fields change")
	require.Equal(t, b, byName["change"].SourceID)
	require.Equal(t, 31, byName["change"].InstrumentModuleID)
	require.Equal(t, 250.0, byName["change"].DurationS)
	require.Equal(t, 3, *byName["change"].Priority)
	require.Equal(t, 35.0, *byName["change"].MinElevationDeg)
	require.NotContains(t, byName, "drop")
	require.Greater(t, byName["new"].ID, ids["drop"], "a new name gets a new id")
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM obs_units WHERE id = $1`, ids["drop"]).Scan(&n))
	require.Zero(t, n, "the unit left out is deleted")

	// obs_units left out: the units stay as they are.
	body := e.programBody("REPL")
	delete(body, "obs_units")
	body["title"] = "Retitled"
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, body)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	got2 := program{}
	r.JSON(t, &got2)
	require.Equal(t, "Retitled", got2.Title)
	require.Equal(t, got.ObsUnits, got2.ObsUnits)

	// A refused replacement (unknown source in the new list) changes nothing, fields included.
	bad := e.programBody("REPL-X", unit("keep", a, 11, 100), unit("other", 999999, 11, 1))
	requireProblem(t, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, bad), http.StatusUnprocessableEntity, "body.obs_units[1].source_id")
	got3 := program{}
	e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.viewer, nil).JSON(t, &got3)
	require.Equal(t, got2, got3)

	// Replacing with [] deletes every unit.
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, e.programBody("REPL"))
	require.Equal(t, http.StatusOK, r.Status)
	got4 := program{}
	r.JSON(t, &got4)
	require.Empty(t, got4.ObsUnits)
}

func testPermissions(t *testing.T, e *env) {
	src := e.createSource(t, map[string]any{"name": "Perm target", "kind": "fixed", "ra_deg": 7.0, "dec_deg": 7.0})
	progBody := e.programBody("PERM", unit("u", src, 11, 10))
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, progBody)
	require.Equal(t, http.StatusCreated, r.Status)
	var p program
	r.JSON(t, &p)

	readToken := func(scope string) string { return e.apiToken(t, e.viewer, scope) }
	progTok, srcTok, insTok, allTok := readToken("read:programs"), readToken("read:sources"), readToken("read:instruments"), readToken("read:*")
	observerTok := e.apiToken(t, e.observer, "read:*")
	srcBody := map[string]any{"name": "Perm new", "kind": "fixed", "ra_deg": 1.0, "dec_deg": 1.0}

	// Directly at the catalog service (not only at the gateway) and through the gateway.
	for _, base := range []func(string) string{e.svc, e.gw} {
		reads := []struct {
			path   string
			scoped string
		}{
			{"/observing_program/", progTok}, {fmt.Sprintf("/observing_program/%d", p.ID), progTok},
			{"/sources/", srcTok}, {fmt.Sprintf("/sources/%d", src), srcTok}, {fmt.Sprintf("/sources/%d/chip", src), srcTok},
			{fmt.Sprintf("/sources/%d/details", src), srcTok}, {"/instruments/", insTok}, {"/instruments/1", insTok},
		}
		for _, rd := range reads {
			requireProblem(t, e.call(t, http.MethodGet, base(rd.path), "", nil), http.StatusUnauthorized, "")
			require.Equal(t, http.StatusOK, e.call(t, http.MethodGet, base(rd.path), e.viewer, nil).Status, rd.path)
			require.Equal(t, http.StatusOK, e.call(t, http.MethodGet, base(rd.path), rd.scoped, nil).Status, "%s with its scope", rd.path)
			require.Equal(t, http.StatusOK, e.call(t, http.MethodGet, base(rd.path), allTok, nil).Status, "%s with read:*", rd.path)
			for _, other := range []string{progTok, srcTok, insTok} {
				if other != rd.scoped {
					requireProblem(t, e.call(t, http.MethodGet, base(rd.path), other, nil), http.StatusForbidden, "")
				}
			}
		}
		resolveBody := map[string]any{"names": []string{"Vega"}}
		require.Equal(t, http.StatusOK, e.call(t, http.MethodPost, base("/sources/resolve"), srcTok, resolveBody).Status)
		requireProblem(t, e.call(t, http.MethodPost, base("/sources/resolve"), progTok, resolveBody), http.StatusForbidden, "")

		// Writes: observer or admin with a session JWT; a viewer or any API token cannot.
		writes := []struct{ method, path string }{
			{http.MethodPost, "/observing_program/"}, {http.MethodPut, fmt.Sprintf("/observing_program/%d", p.ID)},
			{http.MethodDelete, fmt.Sprintf("/observing_program/%d", p.ID)}, {http.MethodPost, "/sources/"},
			{http.MethodPut, fmt.Sprintf("/sources/%d", src)}, {http.MethodDelete, fmt.Sprintf("/sources/%d", src)},
		}
		for _, w := range writes {
			body := any(progBody)
			if strings.HasPrefix(w.path, "/sources") {
				body = srcBody
			}
			if w.method == http.MethodDelete {
				body = nil
			}
			requireProblem(t, e.call(t, w.method, base(w.path), "", body), http.StatusUnauthorized, "")
			requireProblem(t, e.call(t, w.method, base(w.path), e.viewer, body), http.StatusForbidden, "")
			requireProblem(t, e.call(t, w.method, base(w.path), observerTok, body), http.StatusForbidden, "")
		}
	}
	// Nothing was written by the refused calls.
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE name = 'Perm new'`).Scan(&n))
	require.Zero(t, n)
	require.Equal(t, http.StatusOK, e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.viewer, nil).Status)
}

// testExecutedObservationsBlockDeletes: a row referencing an obs unit the way ingest's
// executed_obs_units does (a foreign key without ON DELETE action; the real table comes with the
// ingest migration, whose tests cover it end to end) makes deleting the program, or dropping the
// unit in a PUT, a 409 that changes nothing.
func testExecutedObservationsBlockDeletes(t *testing.T, e *env) {
	_, err := e.db.Exec(`CREATE TABLE test_executed_obs_units (id bigserial PRIMARY KEY, obs_unit_id bigint NOT NULL REFERENCES obs_units (id))`)
	require.NoError(t, err)
	src := e.createSource(t, map[string]any{"name": "Executed target", "kind": "fixed", "ra_deg": 30.0, "dec_deg": 30.0})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("EXEC", unit("done", src, 11, 10), unit("todo", src, 11, 10)))
	require.Equal(t, http.StatusCreated, r.Status)
	var p program
	r.JSON(t, &p)
	_, err = e.db.Exec(`INSERT INTO test_executed_obs_units (obs_unit_id) VALUES ($1)`, p.ObsUnits[0].ID)
	require.NoError(t, err)

	requireProblem(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, nil), http.StatusConflict, "")
	requireProblem(t, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, e.programBody("EXEC-2", unit("todo", src, 12, 10))), http.StatusConflict, "")
	var got program
	e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.viewer, nil).JSON(t, &got)
	require.Equal(t, p, got, "the refused PUT changed nothing")
	// Dropping only the unit without observations is fine.
	r = e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/observing_program/%d", p.ID)), e.observer, e.programBody("EXEC", unit("done", src, 11, 10)))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}
