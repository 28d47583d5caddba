package catalog_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type answer struct {
	Input      string   `json:"input"`
	Found      bool     `json:"found"`
	Name       string   `json:"name"`
	RADeg      *float64 `json:"ra_deg"`
	DecDeg     *float64 `json:"dec_deg"`
	ObjectType string   `json:"object_type"`
	Aliases    []string `json:"aliases"`
	Resolver   string   `json:"resolver"`
	Asked      []string `json:"resolvers_asked"`
	Reference  string   `json:"reference"`
	PMRAMasYr  *float64 `json:"pm_ra_mas_yr"`
	SourceID   *int64   `json:"source_id"`
	Error      string   `json:"error"`
}

func (e *env) resolve(t *testing.T, body any) []answer {
	t.Helper()
	r := e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, body)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Items  []answer `json:"items"`
		Online string   `json:"online"`
	}
	r.JSON(t, &out)
	require.Equal(t, "enabled", out.Online, "this environment configures a (fake) Sesame")
	return out.Items
}

func testResolve(t *testing.T, e *env) {
	db := e.createSource(t, map[string]any{"name": "IRC +10216 test", "kind": "fixed", "ra_deg": 146.989192, "dec_deg": 13.278767, "aliases": []string{"CW Leo test"}})
	inputs := []string{"M 31", "no such thing xyz", "alpha Lyrae", "18h36m56.3s +38d47m01s", "cw leo TEST", "279.234 38.784",
		"Andromeda Galaxy", "HD 172167", "10 95", "m31"}
	items := e.resolve(t, map[string]any{"names": inputs})
	require.Len(t, items, len(inputs))
	for i, it := range items {
		require.Equal(t, inputs[i], it.Input, "answers are in input order")
	}
	check := func(i int, found bool, resolver, name string) {
		t.Helper()
		require.Equal(t, found, items[i].Found, "%q: %+v", inputs[i], items[i])
		require.Equal(t, resolver, items[i].Resolver, "%q", inputs[i])
		if name != "" {
			require.Equal(t, name, items[i].Name, "%q", inputs[i])
		}
		require.NotNil(t, items[i].Aliases)
	}
	check(0, true, "local_catalog", "M31")
	check(1, false, "", "")
	check(2, true, "local_catalog", "Vega")
	check(3, true, "coordinates", "18h36m56.30s +38d47m01.0s")
	check(4, true, "database", "IRC +10216 test")
	check(5, true, "coordinates", "")
	check(6, true, "local_catalog", "M31")
	check(7, true, "local_catalog", "Vega")
	check(8, false, "", "")
	check(9, true, "local_catalog", "M31")
	require.InDelta(t, 10.684792, *items[0].RADeg, 1e-5, "OpenNGC's NGC 224")
	require.Equal(t, []string{"coordinates", "local_catalog", "database", "sesame"}, items[1].Asked, "not found: asked everywhere")
	require.Equal(t, []string{"coordinates", "local_catalog"}, items[0].Asked)
	require.Equal(t, []string{"coordinates", "local_catalog", "database"}, items[4].Asked)
	require.Equal(t, []string{"coordinates"}, items[3].Asked)
	require.Contains(t, items[0].Aliases, "NGC 224")
	require.Equal(t, db, *items[4].SourceID)
	require.Equal(t, []string{"CW Leo test"}, items[4].Aliases)
	require.InDelta(t, 279.234583, *items[3].RADeg, 1e-5)
	require.NotEmpty(t, items[8].Error, "an out-of-range position says why")

	one := e.resolve(t, map[string]any{"name": "Vega"})
	require.Len(t, one, 1)
	require.Equal(t, "Vega", one[0].Name)

	// Limits: 1-100 names, names or name.
	many := make([]string, 101)
	for i := range many {
		many[i] = "Vega"
	}
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{"names": many}), http.StatusUnprocessableEntity, "body.names")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{"names": []string{}}), http.StatusUnprocessableEntity, "body.names")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{}), http.StatusUnprocessableEntity, "body.names")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{"names": []string{"a"}, "name": "b"}), http.StatusUnprocessableEntity, "body.name")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{"names": []string{strings.Repeat("x", 256)}}), http.StatusUnprocessableEntity, "body.names[0]")
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/sources/resolve"), e.viewer, map[string]any{"names": []string{"x"}, "extra": 1}), http.StatusUnprocessableEntity, "body.extra")
	items = e.resolve(t, map[string]any{"names": many[:100]})
	require.Len(t, items, 100)

	// A curated target with a proper motion: the answer names the paper, and a source created
	// from it keeps the motion.
	items = e.resolve(t, map[string]any{"names": []string{"CW Leo", "Sgr B2(N)", "ngc253", "NGC0253", "NGC 253"}})
	require.Equal(t, "IRC+10216", items[0].Name)
	require.Equal(t, "2012A&A...543A..73M", items[0].Reference)
	require.InDelta(t, 35, *items[0].PMRAMasYr, 1e-9)
	require.Equal(t, "Sgr B2(N)", items[1].Name)
	for _, it := range items[2:] {
		require.Equal(t, "NGC 253", it.Name)
	}
	r := e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "VY CMa", "resolve": true})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var created map[string]any
	r.JSON(t, &created)
	require.Equal(t, -2.8, created["pm_ra_mas_yr"])
	require.Equal(t, 2.6, created["pm_dec_mas_yr"])
	require.Equal(t, 2000.0, created["epoch"])
	require.Equal(t, "2012ApJ...744...23Z", created["coord_reference"])

	// A bright star: d3-celestial's J2000.0 position with the Bright Star Catalogue's motion.
	r = e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "Arcturus", "resolve": true})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	created = nil
	r.JSON(t, &created)
	require.Equal(t, "Arcturus", created["name"])
	require.Equal(t, -1093.0, created["pm_ra_mas_yr"])
	require.Equal(t, -1998.0, created["pm_dec_mas_yr"])
	require.Equal(t, 2000.0, created["epoch"])
	require.Equal(t, "d3-celestial@0.7.35 HIP 69673, pm BSC5 HR 5340", created["coord_reference"])
}

// fakeSesame stands in for CDS Sesame: it knows a few names, answers "nothing found" for the
// rest, and stalls on names starting with "slow".
type fakeSesame struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newFakeSesame(t *testing.T) *fakeSesame {
	f := &fakeSesame{calls: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := url.QueryUnescape(r.URL.RawQuery)
		f.mu.Lock()
		f.calls[name]++
		f.mu.Unlock()
		if !strings.HasSuffix(r.URL.Path, "/-oxI/SNV") {
			http.Error(w, "bad path "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if strings.HasPrefix(name, "slow") {
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/xml")
		switch name {
		case "EQ 1742-2859", "slow Sgr A*":
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?>
<Sesame xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<Target option="SNV">
  <name>`+name+`</name>
  <Resolver name="S=Simbad (via url):    1">
    <otype>X</otype>
    <jpos>17:45:40.03 -29:00:28.1</jpos>
    <jradeg>266.41681663</jradeg>
    <jdedeg>-29.00782497</jdedeg>
    <refPos>2004ApJ...616..872R</refPos>
    <oname>NAME Sgr A*</oname>
    <alias>NAME Sgr A*</alias>
    <alias>EQ 1742-2859</alias>
    <alias>[DHL2006] SgrA*</alias>
  </Resolver>
</Target>
</Sesame>`)
		default:
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?>
<Sesame><Target option="SNV"><name>`+name+`</name><INFO>*** Nothing found ***</INFO></Target></Sesame>`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSesame) URL() string { return f.srv.URL + "/cgi-bin/nph-sesame" }

func (f *fakeSesame) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func testSesame(t *testing.T, e *env, f *fakeSesame) {
	// Names the offline catalogue and the database answer never reach Sesame.
	items := e.resolve(t, map[string]any{"names": []string{"Vega", "EQ 1742-2859", "unknown-to-all"}})
	require.Equal(t, "local_catalog", items[0].Resolver)
	require.Zero(t, f.count("Vega"))
	require.True(t, items[1].Found)
	require.Equal(t, "sesame", items[1].Resolver)
	require.Equal(t, "Sgr A*", items[1].Name)
	require.InDelta(t, 266.41681663, *items[1].RADeg, 1e-8)
	require.Equal(t, "X", items[1].ObjectType)
	require.Contains(t, items[1].Aliases, "EQ 1742-2859")
	require.False(t, items[2].Found)
	require.Empty(t, items[2].Error, "not found is an answer, not an error")
	require.Equal(t, 1, f.count("EQ 1742-2859"))
	require.Equal(t, 1, f.count("unknown-to-all"))

	// Answers are cached in Redis: found and not found alike.
	items = e.resolve(t, map[string]any{"names": []string{"eq  1742-2859", "EQ 1742-2859", "unknown-to-all"}})
	require.True(t, items[0].Found)
	require.Equal(t, "eq  1742-2859", items[0].Input)
	require.Equal(t, 1, f.count("EQ 1742-2859"), "served from the cache")
	require.Zero(t, f.count("eq  1742-2859"))
	require.Equal(t, 1, f.count("unknown-to-all"))
	keys, err := e.s.Redis.Client().Keys(t.Context(), "ops:catalog:sesame:*").Result()
	require.NoError(t, err)
	require.Subset(t, keys, []string{"ops:catalog:sesame:v1:eq 1742-2859", "ops:catalog:sesame:v1:unknown-to-all"})
	ttl, err := e.s.Redis.Client().TTL(t.Context(), "ops:catalog:sesame:v1:eq 1742-2859").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 24*time.Hour, "found names are kept for OPS_SESAME_CACHE_TTL (30 days)")

	// A slow Sesame: the answer comes within the timeout (500 ms), found false with the reason,
	// the rest of the batch unharmed, and nothing cached.
	start := time.Now()
	items = e.resolve(t, map[string]any{"names": []string{"slow Sgr A*", "Vega", "slow other"}})
	require.Less(t, time.Since(start), 2500*time.Millisecond, "bounded by OPS_SESAME_TIMEOUT, lookups in parallel")
	require.False(t, items[0].Found)
	require.Contains(t, items[0].Error, "online resolver unavailable")
	require.True(t, items[1].Found)
	require.False(t, items[2].Found)
	e.resolve(t, map[string]any{"names": []string{"slow Sgr A*"}})
	require.Equal(t, 2, f.count("slow Sgr A*"), "a timeout is not cached")
	n, err := e.s.Redis.Client().Exists(t.Context(), "ops:catalog:sesame:v1:slow sgr a*").Result()
	require.NoError(t, err)
	require.Zero(t, n)

	// A source created with resolve=true from Sesame keeps where it came from.
	r := e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, map[string]any{"name": "EQ 1742-2859", "resolve": true})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var src source
	r.JSON(t, &src)
	require.Equal(t, "sesame", src.CoordOrigin)
	require.Contains(t, src.Aliases, "[DHL2006] SgrA*")
	// and from now on the database answers it, before Sesame.
	items = e.resolve(t, map[string]any{"names": []string{"[DHL2006] SgrA*"}})
	require.Equal(t, "database", items[0].Resolver)
}

func testSeedDemo(t *testing.T, e *env) {
	out := e.catalogAdmin(t, "seed-demo")
	require.Contains(t, out, "6 sources and 4 programs created")
	out = e.catalogAdmin(t, "seed-demo")
	require.Contains(t, out, "0 sources and 0 programs created, 6 sources and 4 programs already there")
	var page sourcePage
	e.call(t, http.MethodGet, e.gw("/sources/?q=orion%20kl"), e.viewer, nil).JSON(t, &page)
	require.Equal(t, 1, page.Total)
	var progs programPage
	e.call(t, http.MethodGet, e.gw("/observing_program/?q=CHAI"), e.viewer, nil).JSON(t, &progs)
	require.Equal(t, 1, progs.Total)
	require.Len(t, progs.Items[0].ObsUnits, 3)
	var pwv float64
	require.NoError(t, e.db.QueryRow(`SELECT max_pwv_mm FROM obs_units WHERE name = 'orionkl-hfa'`).Scan(&pwv))
	require.Equal(t, 0.8, pwv, "the demo's constraints")
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE coord_origin = 'demo'`).Scan(&n))
	require.Equal(t, 6, n)
}
