package catalog_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/catalog/postgres"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// TestBenchVisibilityNow (OPS_BENCH=1, `make bench`): GET /visibility/now ranking 2,000 obs units of
// active programs (OPS_BENCH_NOW_UNITS) — random fixed sources, a quarter with their own
// constraints (elevation, airmass, Moon, LST range), and committed executions — sequential
// requests at the catalog service for OPS_BENCH_SECONDS (default 5), p50/p99, at a night-time
// instant. Next to it, in the same run and process-local (no HTTP, no database): the engine's fast
// evaluation of the same units (visibility.NowAll) and the naive one, unit by unit (NowOne: the
// full pipeline at the instant, then Compute's window search over the 24-hour horizon). Target:
// p99 ≤ 100 ms.
func TestBenchVisibilityNow(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	n := benchKnob("OPS_BENCH_NOW_UNITS", 2000)
	seconds := benchKnob("OPS_BENCH_SECONDS", 5)
	e := startEnv(t, map[string]string{"OPS_LOG_LEVEL": "warn", "OPS_RATE_LIMIT_PER_MINUTE": "0"})

	// The units, as the engine takes them and as rows: 20 active programs of n/20 units.
	rng := rand.New(rand.NewPCG(26, 3))
	f := func(v float64) *float64 { return &v }
	units := make([]visibility.NowUnit, n)
	var progs []int64
	for p := range 20 {
		var id int64
		require.NoError(t, e.db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi, status, allocated_hours)
			VALUES ($1, 'Bench', 'PI', 'active', 100) RETURNING id`, fmt.Sprintf("NOW-BENCH-%02d", p)).Scan(&id))
		progs = append(progs, id)
	}
	tx, err := e.db.Begin()
	require.NoError(t, err)
	for i := range n {
		ra, dec := rng.Float64()*360, math.Asin(2*rng.Float64()-1)*180/math.Pi
		var src int64
		require.NoError(t, tx.QueryRow(`INSERT INTO sources (name, kind, ra_deg, dec_deg) VALUES ($1, 'fixed', $2, $3) RETURNING id`,
			fmt.Sprintf("now-bench-%05d", i), ra, dec).Scan(&src))
		oc := &visibility.ObsConstraints{}
		var minEl, airmass, moon, lstA, lstB *float64
		switch i % 8 {
		case 1:
			minEl = f(30)
		case 3:
			airmass = f(1.6)
		case 5:
			moon = f(30)
		case 7:
			lstA, lstB = f(float64(i%24)), f(float64((i+6)%24))
			oc.LSTRange = &visibility.LSTRange{StartHours: *lstA, EndHours: *lstB}
		}
		oc.MinElevationDeg, oc.MaxAirmass, oc.MinMoonSeparationDeg = minEl, airmass, moon
		units[i] = visibility.NowUnit{Source: visibility.Source{Kind: visibility.KindFixed, RADeg: ra, DecDeg: dec}, Constraints: oc}
		var ou int64
		require.NoError(t, tx.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s, priority,
				min_elevation_deg, max_airmass, min_moon_separation_deg, lst_start_hours, lst_end_hours)
			VALUES ($1, $2, $3, 11, 3600, $4, $5, $6, $7, $8, $9) RETURNING id`,
			progs[i%len(progs)], fmt.Sprintf("u%05d", i), src, 1+i%5, minEl, airmass, moon, lstA, lstB).Scan(&ou))
		if i%4 == 0 {
			_, err := tx.Exec(`INSERT INTO executed_obs_units (id, obs_unit_id, instrument_module_id, site, status, start_time, end_time)
				VALUES (gen_random_uuid(), $1, 11, 'fyst', 'completed', '2026-05-01T01:00:00Z', '2026-05-01T01:20:00Z')`, ou)
			require.NoError(t, err)
		}
	}
	require.NoError(t, tx.Commit())
	_, err = e.db.Exec(`ANALYZE`)
	require.NoError(t, err)

	at := "2026-05-10T04:00:00Z"
	atT, _ := time.Parse(time.RFC3339, at)
	path := "/visibility/now?limit=50&at=" + at
	r := e.call(t, http.MethodGet, e.svc(path), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var first nowRanking
	r.JSON(t, &first)
	require.Equal(t, n, first.Total)

	var lat []time.Duration
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	for time.Now().Before(deadline) || len(lat) < 20 {
		t0 := time.Now()
		r := e.call(t, http.MethodGet, e.svc(path), e.viewer, nil)
		lat = append(lat, time.Since(t0))
		require.Equal(t, http.StatusOK, r.Status)
	}
	p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)

	// Of which the database: the two reads of the use case, directly.
	store := &postgres.Store{DB: sqlx.NewDb(e.db, "postgres")}
	var reads []time.Duration
	for range 20 {
		t0 := time.Now()
		active, err := store.ActiveObsUnits(context.Background())
		require.NoError(t, err)
		require.Len(t, active, n)
		reads = append(reads, time.Since(t0))
	}

	// In the same run: the engine alone, fast and naive.
	site := visibility.DefaultSite()
	var fast []time.Duration
	for range 10 {
		t0 := time.Now()
		visibility.NowAll(&site, units, nil, atT, 24*time.Hour)
		fast = append(fast, time.Since(t0))
	}
	t0 := time.Now()
	for i := range units {
		visibility.NowOne(&site, &units[i], nil, atT, 24*time.Hour)
	}
	naive := time.Since(t0)
	fp50 := percentile(fast, 0.5)
	t.Logf("RESULT GET /visibility/now, %d active obs units (limit 50), at the catalog service: %d sequential requests, p50 %s p99 %s | p99 <= 100 ms: %s (GOMAXPROCS %d)",
		n, len(lat), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), verdict(p99 <= 100*time.Millisecond), runtime.GOMAXPROCS(0))
	t.Logf("RESULT of which the database read (the active obs units with their programs, sources and executed time, one query; from the test process): p50 %s",
		percentile(reads, 0.5).Round(100*time.Microsecond))
	t.Logf("RESULT engine alone, same units and instant: fast (NowAll: shared instant and tracks, safe steps) p50 %s | naive, unit by unit (full pipeline + 24-h window search each, NowOne, one core) %s | naive/fast %.0fx",
		fp50.Round(100*time.Microsecond), naive.Round(time.Millisecond), float64(naive)/float64(fp50))
}
