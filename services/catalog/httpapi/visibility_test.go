package httpapi_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/catalog/visibility"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

// visEnv is a catalog (plus authtoken) on a fresh database, with test users.
type visEnv struct {
	s     *testenv.Suite
	db    *sql.DB
	base  string // catalog URL
	user  string // JWT of a viewer
	admin string // JWT of an admin
}

func startVis(t *testing.T, env map[string]string, gateway ...bool) *visEnv {
	t.Helper()
	skip := []string{"transfer", "ingest", "site", "gateway"}
	if len(gateway) > 0 && gateway[0] {
		skip = skip[:3]
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: skip, Env: env})
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return &visEnv{s: s, db: db, base: s.URLs["catalog"], user: s.JWT(t, "vis-viewer", "viewer"), admin: s.JWT(t, "vis-admin", "admin")}
}

// startCatalog starts another catalog process on the suite's database and Redis with changed settings.
func (e *visEnv) startCatalog(t *testing.T, extra map[string]string) string {
	t.Helper()
	env := maps.Clone(e.s.Env)
	addr := testenv.FreeAddr(t)
	env["OPS_CATALOG_ADDR"] = addr
	maps.Copy(env, extra)
	p := testenv.Start(t, "catalog-2", testenv.Binary(t, "catalog"), env)
	testenv.WaitReady(t, p, "http://"+addr+"/readyz", 30*time.Second)
	return "http://" + addr
}

func (e *visEnv) source(t *testing.T, name, kind string, cols map[string]any) int64 {
	t.Helper()
	names := []string{"name", "kind"}
	args := []any{name, kind}
	ph := []string{"$1", "$2"}
	for k, v := range cols {
		names = append(names, k)
		args = append(args, v)
		ph = append(ph, fmt.Sprintf("$%d", len(args)))
	}
	var id int64
	require.NoError(t, e.db.QueryRow(`INSERT INTO sources (`+strings.Join(names, ",")+`) VALUES (`+strings.Join(ph, ",")+`) RETURNING id`, args...).Scan(&id))
	return id
}

// waitJobs waits until no precalculation job is queued or running.
func (e *visEnv) waitJobs(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM visibility_jobs WHERE status IN ('queued', 'running')`).Scan(&n))
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "jobs still running")
		time.Sleep(20 * time.Millisecond)
	}
}

type reply struct {
	status int
	ctype  string
	body   []byte
}

func (e *visEnv) do(t *testing.T, method, base, path, jwt, accept string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), b}
}

func (e *visEnv) get(t *testing.T, path string, into any) reply {
	t.Helper()
	r := e.do(t, http.MethodGet, e.base, path, e.user, "", nil)
	if into != nil && r.status == 200 {
		require.NoError(t, json.Unmarshal(r.body, into), string(r.body))
	}
	return r
}

type visResp struct {
	SourceID int64 `json:"source_id"`
	Samples  []struct {
		Time       time.Time `json:"time"`
		AltDeg     float64   `json:"alt_deg"`
		AzDeg      float64   `json:"az_deg"`
		Airmass    *float64  `json:"airmass"`
		SunSepDeg  float64   `json:"sun_sep_deg"`
		Observable bool      `json:"observable"`
	} `json:"samples"`
	Windows []struct {
		Start       time.Time `json:"start"`
		End         time.Time `json:"end"`
		StartReason string    `json:"start_reason"`
		EndReason   string    `json:"end_reason"`
	} `json:"windows"`
	Rise            *time.Time `json:"rise"`
	Set             *time.Time `json:"set"`
	Transit         *time.Time `json:"transit"`
	MaxAltDeg       float64    `json:"max_alt_deg"`
	HoursObservable float64    `json:"hours_observable"`
	MinElevationDeg float64    `json:"min_elevation_deg"`
}

func requireProblem(t *testing.T, r reply, status int, contains string) {
	t.Helper()
	require.Equal(t, status, r.status, string(r.body))
	require.Contains(t, r.ctype, "application/problem+json")
	require.Contains(t, string(r.body), contains)
}

func wellFormedXML(t *testing.T, b []byte) {
	t.Helper()
	require.NotEmpty(t, b)
	d := xml.NewDecoder(bytes.NewReader(b))
	elements := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if _, ok := tok.(xml.StartElement); ok {
			elements++
		}
	}
	require.Greater(t, elements, 20)
}

func TestVisibilityOfASource(t *testing.T) {
	e := startVis(t, nil)
	sirius := e.source(t, "Sirius", "fixed", map[string]any{"ra_deg": 101.28715533, "dec_deg": -16.71611586, "epoch": 2000.0})
	moon := e.source(t, "Moon", "solar_system", map[string]any{"body": "moon"})
	scan := e.source(t, "CMB scan", "constant_elevation", map[string]any{"elevation_deg": 45.0, "az_min_deg": 300.0, "az_max_deg": 60.0})

	// samples exactly at start + k·step up to end inclusive, a fractional start kept
	start := "2026-01-15T00:00:00.25Z"
	var v visResp
	r := e.get(t, "/visibility/"+fmt.Sprint(sirius)+"?start="+url.QueryEscape(start)+"&end=2026-01-16T00:00:00.25Z&step_s=900", &v)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, sirius, v.SourceID)
	require.Len(t, v.Samples, 97)
	t0, _ := time.Parse(time.RFC3339Nano, start)
	for k, s := range v.Samples {
		require.True(t, s.Time.Equal(t0.Add(time.Duration(k)*900*time.Second)), "sample %d at %s", k, s.Time)
		require.True(t, (s.Airmass == nil) == (s.AltDeg <= 0), "airmass null exactly below the horizon")
		if s.Airmass != nil {
			require.InDelta(t, 1/math.Sin(s.AltDeg*math.Pi/180), *s.Airmass, 1e-5)
		}
	}
	// the route serves the engine: the same altitude as the full SOFA pipeline, to the arcsecond
	site := visibility.DefaultSite()
	for _, k := range []int{0, 40, 96} {
		alt, az, _ := visibility.Full(&site, &visibility.Source{Kind: "fixed", RADeg: 101.28715533, DecDeg: -16.71611586, Epoch: 2000}, v.Samples[k].Time)
		require.InDelta(t, alt, v.Samples[k].AltDeg, 1.0/3600)
		require.InDelta(t, az, v.Samples[k].AzDeg, 2.0/3600/math.Max(0.1, math.Cos(alt*math.Pi/180)))
	}
	require.NotEmpty(t, v.Windows)
	for _, w := range v.Windows {
		require.Contains(t, []string{"rises_above_limit", "leaves_sun_avoidance", "range_start"}, w.StartReason)
		require.Contains(t, []string{"sets_below_limit", "enters_sun_avoidance", "range_end"}, w.EndReason)
	}
	require.NotNil(t, v.Rise)
	require.NotNil(t, v.Set)
	require.NotNil(t, v.Transit)
	require.Greater(t, v.MaxAltDeg, 80.0) // Sirius passes 6° from the zenith here
	require.Equal(t, 20.0, v.MinElevationDeg)
	require.Greater(t, v.HoursObservable, 0.0)

	// start == end: one sample; the obs unit's own elevation limit
	r = e.get(t, "/visibility/"+fmt.Sprint(sirius)+"?start=2026-01-15T06:00:00Z&end=2026-01-15T06:00:00Z&min_elevation_deg=35", &v)
	require.Equal(t, 200, r.status, string(r.body))
	require.Len(t, v.Samples, 1)
	require.Equal(t, 35.0, v.MinElevationDeg)

	// defaults: now, 24 h, 600 s
	r = e.get(t, "/visibility/"+fmt.Sprint(moon), &v)
	require.Equal(t, 200, r.status, string(r.body))
	require.Len(t, v.Samples, 145)
	require.WithinDuration(t, time.Now(), v.Samples[0].Time, time.Minute)
	r = e.get(t, "/visibility/"+fmt.Sprint(scan)+"?start=2026-06-01T00:00:00Z", &v)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, 45.0, v.Samples[0].AltDeg)
	require.Nil(t, v.Rise)

	// bad input: 422 naming the parameter; unknown source 404; no credential 401
	id := fmt.Sprint(sirius)
	requireProblem(t, e.get(t, "/visibility/"+id+"?start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z", nil), 422, "query.end")
	requireProblem(t, e.get(t, "/visibility/"+id+"?start=2026-01-01T00:00:00Z&end=2026-01-08T00:00:01Z&step_s=60", nil), 422, "10081 samples")
	r = e.get(t, "/visibility/"+id+"?start=2026-01-01T00:00:00Z&end=2026-01-07T22:39:00Z&step_s=60", &v)
	require.Equal(t, 200, r.status)
	require.Len(t, v.Samples, 10000) // exactly the limit
	requireProblem(t, e.get(t, "/visibility/"+id+"?start=yesterday", nil), 422, "query.start")
	requireProblem(t, e.get(t, "/visibility/"+id+"?stepsize=60", nil), 422, "query.stepsize")
	requireProblem(t, e.get(t, "/visibility/"+id+"?step_s=0", nil), 422, "step_s")
	requireProblem(t, e.get(t, "/visibility/"+id+"?step_s=99999999999", nil), 422, "step_s")
	requireProblem(t, e.get(t, "/visibility/"+id+"?start=2026-01-01T00:00:00Z&end=2030-01-01T00:00:00Z&step_s=86400", nil), 422, "1100 days")
	requireProblem(t, e.get(t, "/visibility/999999", nil), 404, "no source")
	requireProblem(t, e.do(t, http.MethodGet, e.base, "/visibility/"+id, "", "", nil), 401, "")

	// the plot: Accept or format=svg; well-formed SVG with the curve and shaded windows
	r = e.do(t, http.MethodGet, e.base, "/visibility/"+id+"?start=2026-01-15T00:00:00Z", e.user, "image/svg+xml", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, "image/svg+xml", r.ctype)
	wellFormedXML(t, r.body)
	require.Contains(t, string(r.body), "<polyline")
	require.Contains(t, string(r.body), `class="window" data-source="0" data-start="2026-01-15`)
	r = e.get(t, "/visibility/"+id+"?start=2026-07-10T00:00:00Z&end=2026-07-12T00:00:00Z&format=svg", nil)
	require.Equal(t, 200, r.status)
	wellFormedXML(t, r.body)
	require.Contains(t, string(r.body), `class="sun-avoidance" data-source="0" data-start="2026-07-1`) // Sirius is 39° from the Sun in July
	// longer than 72 h: the long-range plot (SVG only)
	r = e.get(t, "/visibility/"+id+"?start=2026-07-10T00:00:00Z&end=2026-07-20T00:00:00Z&step_s=3600&format=svg", nil)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), "Sun avoidance 2026-07-1")
	requireProblem(t, e.get(t, "/visibility/"+id+"?start=2026-07-10T00:00:00Z&end=2026-07-20T00:00:00Z&step_s=3600&format=png", nil), 422, "query.format")
	r = e.get(t, "/visibility/"+id+"?start=2026-07-10T00:00:00Z&format=png", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, "image/png", r.ctype)
	_, err := png.Decode(bytes.NewReader(r.body))
	require.NoError(t, err)
}

type heatResp struct {
	Days    []string `json:"days"`
	Sources []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"sources"`
	Hours       [][]float64 `json:"hours"`
	Cached      bool        `json:"cached"`
	GeneratedAt time.Time   `json:"generated_at"`
	Parameters  struct {
		Year      int     `json:"year"`
		SourceIDs []int64 `json:"source_ids"`
	} `json:"parameters"`
}

type jobResp struct {
	JobID        int64   `json:"job_id"`
	Status       string  `json:"status"`
	SourcesDone  int     `json:"sources_done"`
	SourcesTotal int     `json:"sources_total"`
	Error        *string `json:"error"`
}

func TestHeatmapCacheAndPrecalculation(t *testing.T) {
	// no worker in the main catalog: jobs stay queued until a worker starts (idempotency is
	// observable); small chunks make the progress visible
	e := startVis(t, map[string]string{"OPS_VISIBILITY_WORKER": "false", "OPS_VISIBILITY_JOB_CHUNK": "40"})
	ids := make([]string, 0, 400)
	var id64 []int64
	for i := range 400 {
		id := e.source(t, fmt.Sprintf("src-%03d", i), "fixed", map[string]any{"ra_deg": float64(i) * 0.9, "dec_deg": -80 + float64(i)*0.35})
		ids = append(ids, fmt.Sprint(id))
		id64 = append(id64, id)
	}
	moon := e.source(t, "Moon", "solar_system", map[string]any{"body": "moon"})
	few := strings.Join(ids[:3], ",") + "," + fmt.Sprint(moon)

	// a few uncached sources: computed on the spot, then served from the cache
	var h1, h2 heatResp
	r := e.get(t, "/visibility/heatmap?year=2026&source_ids="+few, &h1)
	require.Equal(t, 200, r.status, string(r.body))
	require.False(t, h1.Cached)
	require.Len(t, h1.Days, 365)
	require.Equal(t, "2026-01-01", h1.Days[0])
	require.Len(t, h1.Hours, 4)
	require.Len(t, h1.Hours[0], 365)
	require.Equal(t, "Moon", h1.Sources[3].Name)
	r = e.get(t, "/visibility/heatmap?year=2026&source_ids="+few, &h2)
	require.Equal(t, 200, r.status)
	require.True(t, h2.Cached)
	require.Equal(t, h1.Hours, h2.Hours)
	// the cached hours are those of a fresh computation (within the storage's float32)
	site := visibility.DefaultSite()
	y := visibility.NewYear(&site, 2026)
	want, err := y.Hours(t.Context(), []visibility.Source{{Kind: "fixed", RADeg: 0, DecDeg: -80}}, nil)
	require.NoError(t, err)
	for d := range 365 {
		require.InDelta(t, want[0][d], h2.Hours[0][d], 0.006)
	}

	// invalidation: moving a source (through the catalog's own PUT /sources/{id}) makes its row
	// stale; the others stay cached
	r = e.do(t, http.MethodPut, e.base, fmt.Sprintf("/sources/%d", id64[0]), e.admin, "",
		map[string]any{"name": "src-000", "kind": "fixed", "ra_deg": 0.0, "dec_deg": 10.0})
	require.Equal(t, 200, r.status, string(r.body))
	var h3 heatResp
	require.Equal(t, 200, e.get(t, "/visibility/heatmap?year=2026&source_ids="+few, &h3).status)
	require.False(t, h3.Cached)
	require.NotEqual(t, h2.Hours[0], h3.Hours[0])
	require.Equal(t, h2.Hours[1], h3.Hours[1])
	require.Equal(t, 200, e.get(t, "/visibility/heatmap?year=2026&source_ids="+few, &h3).status)
	require.True(t, h3.Cached)
	// … and so do other site settings (another catalog with a smaller Sun avoidance radius)
	other := e.startCatalog(t, map[string]string{"OPS_SUN_AVOIDANCE_DEG": "30", "OPS_VISIBILITY_WORKER": "false"})
	r = e.do(t, http.MethodGet, other, "/visibility/heatmap?year=2026&source_ids="+few, e.user, "", nil)
	require.Equal(t, 200, r.status)
	var h4 heatResp
	require.NoError(t, json.Unmarshal(r.body, &h4))
	require.False(t, h4.Cached)

	// metrics: rows from the cache and computed ones are counted
	m := e.do(t, http.MethodGet, e.base, "/metrics", "", "", nil)
	require.Equal(t, 200, m.status)
	require.Contains(t, string(m.body), `obsops_visibility_heatmap_rows_total{result="cached"} 11`)
	require.Contains(t, string(m.body), `obsops_visibility_heatmap_rows_total{result="computed"} 5`)

	// too many uncached sources: 404 saying how to compute it
	all := strings.Join(ids, ",")
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2026&source_ids="+all, nil), 404, "POST /visibility/precalculate")
	// bad input
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2026", nil), 422, "program_id")
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2026&source_ids=1,x", nil), 422, "query.source_ids")
	requireProblem(t, e.get(t, "/visibility/heatmap?year=1800&source_ids=1", nil), 422, "year")
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2026&source_ids="+few+"&colour=red", nil), 422, "query.colour")
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2026&source_ids=999999", nil), 404, "999999")

	// precalculate: admins only, checked by the service
	body := map[string]any{"year": 2026, "source_ids": id64}
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.user, "", body), 403, "")
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", map[string]any{"year": 2026, "all": true, "source_ids": id64}), 422, "exactly one")
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", map[string]any{"year": 2026, "program_id": 999999}), 404, "program")
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", map[string]any{"year": 2026, "source_ids": []int64{999999}}), 422, "body.source_ids")
	r = e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", body)
	require.Equal(t, 202, r.status, string(r.body))
	var j1, j2 jobResp
	require.NoError(t, json.Unmarshal(r.body, &j1))
	require.Equal(t, "queued", j1.Status)
	require.Equal(t, 400, j1.SourcesTotal)
	// idempotent: the same request while queued answers the same job
	r = e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", body)
	require.Equal(t, 202, r.status)
	require.NoError(t, json.Unmarshal(r.body, &j2))
	require.Equal(t, j1.JobID, j2.JobID)
	var js jobResp
	require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/precalculate/%d", j1.JobID), &js).status)
	require.Equal(t, "queued", js.Status)
	requireProblem(t, e.get(t, "/visibility/precalculate/999999", nil), 404, "no precalculation job")

	// a worker (another catalog process) runs it; progress rises chunk by chunk to completion
	e.startCatalog(t, map[string]string{"OPS_VISIBILITY_WORKER": "true", "OPS_VISIBILITY_JOB_CHUNK": "40"})
	seen := map[int]bool{}
	deadline := time.Now().Add(60 * time.Second)
	last := -1
	for {
		require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/precalculate/%d", j1.JobID), &js).status)
		require.GreaterOrEqual(t, js.SourcesDone, last, "progress never goes back")
		last = js.SourcesDone
		seen[js.SourcesDone] = true
		if js.Status == "completed" || js.Status == "failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.Equal(t, "completed", js.Status, "error: %v", js.Error)
	require.Equal(t, 400, js.SourcesDone)
	t.Logf("progress values seen: %d", len(seen))

	// now the whole set is served from the cache
	var hall heatResp
	r = e.get(t, "/visibility/heatmap?year=2026&source_ids="+all, &hall)
	require.Equal(t, 200, r.status, string(r.body))
	require.True(t, hall.Cached)
	require.Len(t, hall.Hours, 400)
	want, err = y.Hours(t.Context(), []visibility.Source{{Kind: "fixed", RADeg: 5 * 0.9, DecDeg: -80 + 5*0.35}}, nil)
	require.NoError(t, err)
	for d := range 365 {
		require.InDelta(t, want[0][d], hall.Hours[5][d], 0.006)
	}

	// a new job for the same request runs again (not idempotent once finished) and skips the cached rows
	r = e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", body)
	require.Equal(t, 202, r.status)
	require.NoError(t, json.Unmarshal(r.body, &j2))
	require.NotEqual(t, j1.JobID, j2.JobID)

	// images: well-formed and non-empty
	r = e.get(t, "/visibility/heatmap?year=2026&source_ids="+few+"&format=svg", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "image/svg+xml", r.ctype)
	wellFormedXML(t, r.body)
	require.Contains(t, string(r.body), "Moon")
	r = e.get(t, "/visibility/heatmap?year=2026&source_ids="+all+"&format=png", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "image/png", r.ctype)
	img, err := png.Decode(bytes.NewReader(r.body))
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 365)
	require.Greater(t, img.Bounds().Dy(), 400)
}

func TestHeatmapOfAProgram(t *testing.T) {
	e := startVis(t, nil)
	a := e.source(t, "A", "fixed", map[string]any{"ra_deg": 10.0, "dec_deg": -40.0})
	b := e.source(t, "B", "fixed", map[string]any{"ra_deg": 200.0, "dec_deg": 5.0})
	var prog, module int64
	require.NoError(t, e.db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi) VALUES ('P1', 'Program', 'PI') RETURNING id`).Scan(&prog))
	require.NoError(t, e.db.QueryRow(`SELECT id FROM instrument_modules ORDER BY id LIMIT 1`).Scan(&module))
	for i, src := range []int64{a, b, a} {
		_, err := e.db.Exec(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, $2, $3, $4, 600)`,
			prog, fmt.Sprintf("u%d", i), src, module)
		require.NoError(t, err)
	}
	var h heatResp
	r := e.get(t, fmt.Sprintf("/visibility/heatmap?year=2027&program_id=%d", prog), &h)
	require.Equal(t, 200, r.status, string(r.body))
	require.Len(t, h.Sources, 2) // distinct sources
	require.Equal(t, []int64{a, b}, h.Parameters.SourceIDs)
	requireProblem(t, e.get(t, "/visibility/heatmap?year=2027&program_id=999999", nil), 404, "program")
	requireProblem(t, e.get(t, fmt.Sprintf("/visibility/heatmap?year=2027&program_id=%d&source_ids=%d", prog, a), nil), 422, "either")
}

// TestVisibilityAccess: reads take any user's JWT or an API token with read:sources (not one
// without it); precalculation takes an admin.
func TestVisibilityAccess(t *testing.T) {
	e := startVis(t, nil, true)
	src := e.source(t, "Vega", "fixed", map[string]any{"ra_deg": 279.23473479, "dec_deg": 38.78368896})
	token := func(scope string) string {
		r := e.do(t, http.MethodPost, e.s.URLs["authtoken"], "/api/tokens/", e.user, "", map[string]any{"name": "vis " + scope, "scopes": []string{scope}})
		require.Equal(t, 201, r.status, string(r.body))
		var nt struct {
			Token string `json:"token"`
		}
		require.NoError(t, json.Unmarshal(r.body, &nt))
		return nt.Token
	}
	withScope, without := token("read:sources"), token("read:programs")
	path := fmt.Sprintf("/visibility/%d?start=2026-03-01T00:00:00Z&end=2026-03-01T01:00:00Z", src)
	require.Equal(t, 200, e.do(t, http.MethodGet, e.base, path, withScope, "", nil).status)
	requireProblem(t, e.do(t, http.MethodGet, e.base, path, without, "", nil), 403, "")
	requireProblem(t, e.do(t, http.MethodGet, e.base, path, "not-a-token", "", nil), 401, "")
	// through the gateway: JSON, the plot and the problems pass unchanged
	r := e.do(t, http.MethodGet, e.s.GatewayURL, path, withScope, "", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, "application/json", r.ctype)
	r = e.do(t, http.MethodGet, e.s.GatewayURL, path, e.user, "image/svg+xml", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "image/svg+xml", r.ctype)
	wellFormedXML(t, r.body)
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, path+"&step=1", e.user, "", nil), 422, "query.step")

	// several sources on one plot, through the gateway: SVG (axes, a window row per source), PNG
	orion := e.source(t, "Orion KL", "fixed", map[string]any{"ra_deg": 83.810475, "dec_deg": -5.375161})
	sgr := e.source(t, "Sgr B2(N)", "fixed", map[string]any{"ra_deg": 266.832792, "dec_deg": -28.371778})
	plot := fmt.Sprintf("/visibility/plot?source_id=%d&source_id=%d&source_id=%d&start=2026-10-15T12:00:00Z", src, orion, sgr)
	r = e.do(t, http.MethodGet, e.s.GatewayURL, plot, withScope, "", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, "image/svg+xml", r.ctype)
	wellFormedXML(t, r.body)
	for _, s := range []string{`id="axis-utc"`, `id="axis-local"`, `id="axis-lst"`, `id="axis-airmass"`, `id="legend"`, `class="moon"`,
		`class="window" data-source="0"`, `class="window" data-source="1"`, `class="window" data-source="2"`, "Vega", "Orion KL", "Sgr B2(N)", "twilight-night"} {
		require.Contains(t, string(r.body), s)
	}
	r = e.do(t, http.MethodGet, e.s.GatewayURL, plot, withScope, "image/png", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, "image/png", r.ctype)
	img, err := png.Decode(bytes.NewReader(r.body))
	require.NoError(t, err)
	require.Equal(t, 1000, img.Bounds().Dx())
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, plot, without, "", nil), 403, "")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, "/visibility/plot", e.user, "", nil), 422, "query.source_id")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, fmt.Sprintf("/visibility/plot?source_id=%d&source_id=%d", src, src), e.user, "", nil), 422, "query.source_id")
	eleven := "/visibility/plot?source_id=1"
	for i := 2; i <= 11; i++ {
		eleven += fmt.Sprintf("&source_id=%d", i)
	}
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, eleven, e.user, "", nil), 422, "source_id")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, fmt.Sprintf("/visibility/plot?source_id=%d&start=2026-10-15T00:00:00Z&end=2026-10-19T00:00:00Z", src), e.user, "", nil), 422, "query.end")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, fmt.Sprintf("/visibility/plot?source_id=%d&step_s=5", src), e.user, "", nil), 422, "query.step_s")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, "/visibility/plot?source_id=999999", e.user, "", nil), 404, "999999")
	requireProblem(t, e.do(t, http.MethodGet, e.s.GatewayURL, fmt.Sprintf("/visibility/plot?source_id=%d&colour=red", src), e.user, "", nil), 422, "query.colour")
	heat := fmt.Sprintf("/visibility/heatmap?year=2026&source_ids=%d", src)
	require.Equal(t, 200, e.do(t, http.MethodGet, e.base, heat, withScope, "", nil).status)
	requireProblem(t, e.do(t, http.MethodGet, e.base, heat, without, "", nil), 403, "")
	// precalculation: not for an API token, an observer or a viewer
	body := map[string]any{"year": 2026, "all": true}
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", withScope, "", body), 403, "")
	requireProblem(t, e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.s.JWT(t, "vis-observer", "observer"), "", body), 403, "")
	r = e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", body)
	require.Equal(t, 202, r.status, string(r.body))
	var j jobResp
	require.NoError(t, json.Unmarshal(r.body, &j))
	require.Equal(t, 200, e.do(t, http.MethodGet, e.base, fmt.Sprintf("/visibility/precalculate/%d", j.JobID), withScope, "", nil).status)
	e.waitJobs(t)
}

// TestPrecalculationRecordedBeforeACrash: a job recorded but never queued (the catalog died in
// between) is picked up by the next equal request instead of blocking it forever.
func TestPrecalculationRecordedBeforeACrash(t *testing.T) {
	e := startVis(t, nil)
	var ids []int64
	for i := range 3 {
		ids = append(ids, e.source(t, fmt.Sprintf("c%d", i), "fixed", map[string]any{"ra_deg": float64(i) * 100, "dec_deg": -30.0}))
	}
	site := visibility.DefaultSite()
	var orphan int64
	require.NoError(t, e.db.QueryRow(`INSERT INTO visibility_jobs (idem_key, year, source_ids, sources_total) VALUES ($1, 2027, $2, 3) RETURNING id`,
		precalc.JobKey(&site, 2027, ids), pq.Array(ids)).Scan(&orphan))
	r := e.do(t, http.MethodPost, e.base, "/visibility/precalculate", e.admin, "", map[string]any{"year": 2027, "source_ids": ids})
	require.Equal(t, 202, r.status, string(r.body))
	var j jobResp
	require.NoError(t, json.Unmarshal(r.body, &j))
	require.Equal(t, orphan, j.JobID)
	e.waitJobs(t)
	require.Equal(t, 200, e.get(t, fmt.Sprintf("/visibility/precalculate/%d", orphan), &j).status)
	require.Equal(t, "completed", j.Status)
	require.Equal(t, 3, j.SourcesDone)
}
