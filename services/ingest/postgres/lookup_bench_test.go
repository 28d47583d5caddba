package postgres_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest/postgres"
)

// TestBenchLookupLanes measures the committed-path lookup at acknowledgement alone
// (Store.FilesByIDOrPath, one new path per call, as a single registration asks) at a fixed rate
// against 100,000 committed files, with the shared queries in one lane (as before) and in two,
// alternating every 2 s so that both see the same load on a shared machine. OPS_BENCH=1 runs it.
func TestBenchLookupLanes(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with make bench (OPS_BENCH=1)")
	}
	db := openDB(t)
	_, err := db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
		SELECT gen_random_uuid(), gen_random_uuid(), 11, 'old/' || g, 1, 'xxh64:0123456789abcdef' FROM generate_series(1, 100000) g`)
	require.NoError(t, err)
	_, err = db.Exec(`ANALYZE raw_data_files`)
	require.NoError(t, err)
	const rate, slice, rounds = 2000, 2 * time.Second, 4
	stores := map[int]*postgres.Store{1: {DB: db}, 2: {DB: db}}
	postgres.SetLookupLanes(stores[1], 1)
	lat := map[int][]time.Duration{}
	n := 0
	for r := range 2 * rounds {
		lanes := 1 + r%2
		s := stores[lanes]
		var mu sync.Mutex
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / rate)
		end := time.Now().Add(slice)
		for time.Now().Before(end) {
			<-tick.C
			n++
			path := fmt.Sprintf("new/%d", n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				rows, err := s.FilesByIDOrPath(t.Context(), nil, []int64{11}, []string{path})
				d := time.Since(start)
				require.NoError(t, err)
				require.Empty(t, rows)
				mu.Lock()
				if r >= 2 { // the first two slices warm up
					lat[lanes] = append(lat[lanes], d)
				}
				mu.Unlock()
			}()
		}
		tick.Stop()
		wg.Wait()
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		return ds[int(p*float64(len(ds)-1))]
	}
	for _, lanes := range []int{1, 2} {
		ds := lat[lanes]
		measured := time.Duration(rounds-1) * slice // per variant, after the warm-up
		t.Logf("lookup at %d/s asked (%.0f/s sent), %d lane(s): p50 %s p99 %s (%d lookups)", rate, float64(len(ds))/measured.Seconds(), lanes,
			pct(ds, .5).Round(10*time.Microsecond), pct(ds, .99).Round(10*time.Microsecond), len(ds))
	}
}
