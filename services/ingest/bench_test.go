package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

func benchSeconds() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("OPS_BENCH_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 5 * time.Second
}

// openLoop sends single-file registrations to base at rate per second for d, each at its
// scheduled time whatever the answers before it (open loop: latency counts from the scheduled
// time, so queueing is not hidden). It returns the latencies of the 201s and the error count.
func openLoop(t *testing.T, c *http.Client, base, token, eou string, rate int, d time.Duration, tag string) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	sem := make(chan struct{}, 4096)
	for i := range n {
		at := begin.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"executed_obs_unit_id":%q,"instrument_module_id":11,"path":"bench/%s/%08d","size_bytes":1,"checksum":"xxh64:0123456789abcdef"}`, eou, tag, i)
			req, _ := http.NewRequest(http.MethodPost, base+"/raw_data_files/", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				errs.Add(1)
				return
			}
			drain(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				errs.Add(1)
				return
			}
			mu.Lock()
			lat = append(lat, time.Since(at))
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, int(errs.Load())
}

func pct(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(float64(len(l))*p))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func verdictLine(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// TestBenchIngest measures the buffered write path through the gateway with its limits on
// (default rate limit 1200/min and the ingest class's own budget), each figure beside its
// baseline from the same run: acknowledgement latency at 2,000 req/s open loop (baseline: the
// ingest service directly), the highest sustained rate with no error, time to durable at 500
// req/s, bulk registration of 1,000-file requests against a raw batched INSERT … SELECT unnest,
// and what appendfsync always costs.
func TestBenchIngest(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with make bench (OPS_BENCH=1)")
	}
	e := newEnv(t, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "1200", "OPS_LOG_LEVEL": "error", "OPS_DB_MAX_CONNS": "20"})
	eou := e.start(t, startBody(e.obsUnit)).ID
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxIdleConns: 2048}}
	d := benchSeconds()
	gw, direct := e.s.GatewayURL, e.s.URLs["ingest"]
	// warm-up (connections, token cache)
	openLoop(t, c, gw, e.token, eou, 200, time.Second, "warm")

	// 1. Acknowledgement latency at 2,000 req/s, open loop.
	dl, derr := openLoop(t, c, direct, e.token, eou, 2000, d, "ack-direct")
	gl, gerr := openLoop(t, c, gw, e.token, eou, 2000, d, "ack-gw")
	t.Logf("ack at 2000 req/s: gateway p50 %s p99 %s errors %d | baseline direct p50 %s p99 %s errors %d | target p99 <= 20 ms: %s",
		ms(pct(gl, .5)), ms(pct(gl, .99)), gerr, ms(pct(dl, .5)), ms(pct(dl, .99)), derr, verdictLine(pct(gl, .99) <= 20*time.Millisecond && gerr == 0))

	// 2. Highest sustained rate with no error (p99 under 1 s), gateway and direct.
	ladder := func(base, tag string) (best int) {
		for _, rate := range []int{500, 1000, 1500, 2000, 3000, 4000, 6000, 8000} {
			l, errs := openLoop(t, c, base, e.token, eou, rate, d, fmt.Sprintf("%s-%d", tag, rate))
			ok := errs == 0 && len(l) == int(d.Seconds()*float64(rate)) && pct(l, .99) < time.Second
			t.Logf("  %s %d req/s: p50 %s p99 %s errors %d %v", tag, rate, ms(pct(l, .5)), ms(pct(l, .99)), errs, ok)
			if !ok {
				return best
			}
			best = rate
		}
		return best
	}
	gmax, dmax := ladder(gw, "gw"), ladder(direct, "direct")
	t.Logf("max sustained with 0 errors: gateway %d req/s | baseline direct %d req/s | target >= 6000: %s", gmax, dmax, verdictLine(gmax >= 6000))

	// 3. Time to durable at 500 req/s: from acceptance (the row's created_at, the API's clock) to
	// the row (committed_at).
	waitDrained(t, e)
	openLoop(t, c, gw, e.token, eou, 500, d, "durable")
	waitDrained(t, e)
	var p50, p99 float64
	require.NoError(t, e.db.QueryRow(`SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.99) WITHIN GROUP (ORDER BY s)
FROM (SELECT extract(epoch FROM committed_at - created_at) AS s FROM raw_data_files WHERE path LIKE 'bench/durable/%') x`).Scan(&p50, &p99))
	t.Logf("time to durable at 500 req/s: p50 %.1f ms p99 %.1f ms | target p50 <= 50 ms, p99 <= 250 ms: %s",
		p50*1000, p99*1000, verdictLine(p50 <= 0.05 && p99 <= 0.25))

	// 4. Bulk: 1,000-file requests end to end vs raw batched INSERT … SELECT unnest.
	waitDrained(t, e)
	const reqs, per = 20, 1000
	bodies := make([][]byte, reqs)
	for r := range reqs {
		files := make([]map[string]any, per)
		for i := range files {
			files[i] = fileBody(eou, fmt.Sprintf("bench/bulk/%03d/%05d.fits", r, i))
		}
		bodies[r], _ = json.Marshal(map[string]any{"files": files})
	}
	begin := time.Now()
	var wg sync.WaitGroup
	next := make(chan int, reqs)
	for r := range reqs {
		next <- r
	}
	close(next)
	for range 4 { // four instruments sending bulks at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				resp := doURL(t, c, http.MethodPost, gw+"/raw_data_files/bulk", e.token, bodies[r])
				require.Equal(t, http.StatusCreated, resp.Status, "%.300s", resp.Body)
			}
		}()
	}
	wg.Wait()
	for e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'bench/bulk/%'`) < reqs*per {
		time.Sleep(5 * time.Millisecond)
	}
	bulkRate := float64(reqs*per) / time.Since(begin).Seconds()
	begin = time.Now()
	for r := range reqs {
		ids, eous, paths, sums := make([]string, per), make([]string, per), make([]string, per), make([]string, per)
		for i := range per {
			ids[i], eous[i], paths[i], sums[i] = ingest.NewID(), eou, fmt.Sprintf("bench/raw/%03d/%05d.fits", r, i), "xxh64:0123456789abcdef"
		}
		_, err := e.db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
SELECT id, eou, 11, path, 1, sum FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS f(id, eou, path, sum)`,
			pq.StringArray(ids), pq.StringArray(eous), pq.StringArray(paths), pq.StringArray(sums))
		require.NoError(t, err)
	}
	rawRate := float64(reqs*per) / time.Since(begin).Seconds()
	t.Logf("bulk 1,000-file requests end to end: %.0f rows/s | baseline raw INSERT … SELECT unnest: %.0f rows/s | ratio %.0f%% (target >= 50%%): %s",
		bulkRate, rawRate, 100*bulkRate/rawRate, verdictLine(bulkRate >= rawRate/2))

	// 5. The price of appendfsync always (no power-loss window) on the acknowledgement path.
	rdb := e.s.Redis.Client()
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "always").Err())
	al, aerr := openLoop(t, c, gw, e.token, eou, 2000, d, "fsync-always")
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "everysec").Err())
	t.Logf("ack at 2000 req/s with appendfsync always: p50 %s p99 %s errors %d | everysec (above): p50 %s p99 %s",
		ms(pct(al, .5)), ms(pct(al, .99)), aerr, ms(pct(gl, .5)), ms(pct(gl, .99)))
	amax := 0
	for _, rate := range []int{1000, 2000, 3000, 4000, 6000} {
		require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "always").Err())
		l, errs := openLoop(t, c, gw, e.token, eou, rate, d, fmt.Sprintf("always-%d", rate))
		require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "everysec").Err())
		if errs > 0 || pct(l, .99) >= time.Second {
			break
		}
		amax = rate
	}
	t.Logf("max sustained with appendfsync always: %d req/s | everysec: %d req/s", amax, gmax)
}

func waitDrained(t *testing.T, e *env) {
	rdb := e.s.Redis.Client()
	require.Eventually(t, func() bool {
		return rdb.LLen(context.Background(), "asynq:{ingest}:pending").Val() == 0 && rdb.LLen(context.Background(), "asynq:{ingest}:active").Val() == 0
	}, 5*time.Minute, 50*time.Millisecond)
}
