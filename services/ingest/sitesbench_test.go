package ingest_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/services/ingest"
)

// TestBenchSites measures the secondary site of the two-site topology (twosites_test.go), each
// figure next to its baseline from the same run:
//
//   - acknowledgement latency at the secondary while the WAN is down, open loop at 1,000
//     single-file registrations a second for OPS_BENCH_SECONDS (baseline: the same at the main
//     site's ingest), each site first sent one unmeasured second at that rate as in
//     TestBenchIngest — at the secondary the first second after the cut, reported apart;
//     target p99 ≤ 20 ms;
//   - replay after an outage: OPS_BENCH_SITES_FILES (100,000) files registered at the secondary in
//     1,000-file bulk requests while the WAN is cut, the WAN kept cut OPS_BENCH_SITES_OUTAGE longer
//     (default 0: what the drain depends on is the backlog, not how long it waited), then restored:
//     rows per second from WAN up to the last row in the main primary, next to a raw batched
//     INSERT … SELECT unnest of as many rows (1,000 a statement) into the same primary; target ≥
//     50%. The single registrations of the latency phase are drained first, the same way, and
//     reported beside it (no target: one task per row).
func TestBenchSites(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with make bench (OPS_BENCH=1)")
	}
	files := 100000
	if n, err := strconv.Atoi(os.Getenv("OPS_BENCH_SITES_FILES")); err == nil && n > 0 {
		files = n
	}
	var outage time.Duration
	if v := os.Getenv("OPS_BENCH_SITES_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "OPS_BENCH_SITES_OUTAGE")
		outage = d
	}
	quiet := map[string]string{"OPS_LOG_LEVEL": "error", "OPS_DB_MAX_CONNS": "20"}
	ts := startTwoSites(t, twoSitesOptions{Main: quiet, Secondary: quiet})
	e := ts.main
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxIdleConns: 2048}}
	d := benchSeconds()
	mainURL := e.s.URLs["ingest"]
	mainEOU := e.start(t, startBody(e.obsUnit)).ID
	r := doURL(t, c, http.MethodPost, ts.secondary+"/executed_obs_units/start", e.token, startBody(e.obsUnit))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var st answer
	r.json(t, &st)
	secEOU := st.ID
	// Each site is first sent one unmeasured second at the measured rate, as TestBenchIngest's
	// steps are (warmUp): the phases measure a steady stream, not the connections it opens.
	load := newLoadClient()
	openLoop(load, mainURL, e.token, mainEOU, 1000, warmUp, "warm-main")
	openLoop(load, ts.secondary, e.token, secEOU, 1000, warmUp, "warm-sec")
	waitRows(t, e, "bench/warm-sec/%", 1000, time.Minute)

	// 1. Acknowledgement latency, open loop at 1,000 req/s: the main site, then the secondary with
	// the WAN down.
	ml, merr := openLoop(load, mainURL, e.token, mainEOU, 1000, d, "ack-main")
	// The main site's worker drains its phase before the secondary's starts (on one machine the
	// two would share the disk: Redis' AOF fsync and token checks stalled for seconds).
	waitDrained(t, e)
	ts.CutWAN()
	// The first second after the cut is the secondary's warm-up, measured apart: every slow
	// request of the phase was in the cut's first quarter second (up to ~300 ms), while the
	// processes there react to the cut (replication, the worker's and the site's probes; not
	// isolated further).
	cl, cerr := openLoop(load, ts.secondary, e.token, secEOU, 1000, warmUp, "ack-sec-cut")
	sl, serr := openLoop(load, ts.secondary, e.token, secEOU, 1000, d, "ack-sec")
	t.Logf("ack at 1,000 req/s, WAN down: secondary p50 %s p99 %s errors %d | baseline main site p50 %s p99 %s errors %d | target p99 <= 20 ms: %s",
		ms(pct(sl, .5)), ms(pct(sl, .99)), serr, ms(pct(ml, .5)), ms(pct(ml, .99)), merr, verdictLine(pct(sl, .99) <= 20*time.Millisecond && serr == 0))
	t.Logf("  the first second after the cut (not in the figure above): p50 %s p99 %s errors %d", ms(pct(cl, .5)), ms(pct(cl, .99)), cerr)
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'bench/ack-sec%'`), "nothing may cross a cut WAN")

	// 2. Drain of the single registrations (one task each).
	singles := len(cl) + len(sl)
	cpu := ts.cpuMeter(t)
	up := time.Now()
	ts.RestoreWAN(t)
	first, all := waitRows(t, e, "bench/ack-sec%", singles, 10*time.Minute)
	singleRate := float64(singles) / all.Sub(up).Seconds()
	t.Logf("replay of %d single registrations: first row %s after WAN up, all after %s: %.0f rows/s; CPU µs per row: %s",
		singles, first.Sub(up).Round(time.Millisecond), all.Sub(up).Round(time.Millisecond), singleRate, cpu.perRow(singles))

	// 3. Drain of bulk registrations buffered while the WAN is cut.
	ts.CutWAN()
	cut := time.Now()
	bufferRate := registerBulk(t, c, ts.secondary, e.token, secEOU, "bench/sec-bulk/", files)
	time.Sleep(time.Until(cut.Add(outage)))
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'bench/sec-bulk/%'`), "nothing may cross a cut WAN")
	cpu = ts.cpuMeter(t)
	up = time.Now()
	ts.RestoreWAN(t)
	first, all = waitRows(t, e, "bench/sec-bulk/%", files, 20*time.Minute)
	bulkCPU := cpu.perRow(files)
	drainRate := float64(files) / all.Sub(up).Seconds()
	t.Logf("(%d files buffered at the secondary in 1,000-file requests at %.0f rows/s, WAN cut for %s)",
		files, bufferRate, up.Sub(cut).Round(time.Second))

	// Baseline: raw batched INSERT … SELECT unnest into the same primary.
	begin := time.Now()
	for r := 0; r < files; r += 1000 {
		n := min(1000, files-r)
		ids, eous, paths, sums := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		for i := range n {
			ids[i], eous[i], paths[i], sums[i] = ingest.NewID(), mainEOU, fmt.Sprintf("bench/raw/%07d.fits", r+i), "xxh64:0123456789abcdef"
		}
		_, err := e.db.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
SELECT id, eou, 11, path, 1, sum FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS f(id, eou, path, sum)`,
			pq.StringArray(ids), pq.StringArray(eous), pq.StringArray(paths), pq.StringArray(sums))
		require.NoError(t, err)
	}
	rawRate := float64(files) / time.Since(begin).Seconds()
	t.Logf("replay of %d files after the outage: first row %s after WAN up, all after %s: %.0f rows/s | baseline raw INSERT … SELECT unnest: %.0f rows/s | ratio %.0f%% (target >= 50%%): %s",
		files, first.Sub(up).Round(time.Millisecond), all.Sub(up).Round(time.Millisecond), drainRate, rawRate,
		100*drainRate/rawRate, verdictLine(drainRate >= rawRate/2))
	t.Logf("  CPU µs per row during that replay: %s", bulkCPU)
	t.Logf("single registrations replayed at %.0f rows/s = %.0f%% of the raw baseline", singleRate, 100*singleRate/rawRate)
}

// waitRows waits until n rows whose path is LIKE pattern are in the main database; it returns
// when the first and the last arrived (as seen by polling every 50 ms).
func waitRows(t *testing.T, e *env, pattern string, n int, within time.Duration) (first, all time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		got := e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE $1`, pattern)
		if got > 0 && first.IsZero() {
			first = time.Now()
		}
		if got >= n {
			return first, time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("only part of %d rows %s arrived within %s", n, pattern, within)
	return
}

// registerBulk registers n files at base in 1,000-file requests from four senders; it returns
// the rate at which they were acknowledged.
func registerBulk(t *testing.T, c *http.Client, base, token, eou, prefix string, n int) float64 {
	t.Helper()
	next := make(chan int, n/1000+1)
	for r := 0; r < n; r += 1000 {
		next <- r
	}
	close(next)
	begin := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				files := make([]map[string]any, 0, 1000)
				for i := r; i < min(r+1000, n); i++ {
					files = append(files, fileBody(eou, fmt.Sprintf("%s%07d.fits", prefix, i)))
				}
				resp := doURL(t, c, http.MethodPost, base+"/raw_data_files/bulk", token, map[string]any{"files": files})
				require.Equal(t, http.StatusCreated, resp.Status, "%.300s", resp.Body)
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(begin).Seconds()
}

// cpuMeter samples the CPU time (user+system, from /proc) of the processes a replay runs on: the
// secondary's worker, the secondary's Redis, the main primary's PostgreSQL processes, and this
// test process (the WAN proxy, the clients and the polling).
type cpuMeter struct {
	ts     *twoSites
	t      *testing.T
	before map[string]float64
}

func (ts *twoSites) cpuMeter(t *testing.T) *cpuMeter {
	return &cpuMeter{ts: ts, t: t, before: ts.cpuSeconds()}
}

// perRow reports each part's CPU µs per row since the meter was made.
func (m *cpuMeter) perRow(rows int) string {
	after := m.ts.cpuSeconds()
	var parts []string
	for _, k := range []string{"worker", "redis", "postgres", "test"} {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, (after[k]-m.before[k])*1e6/float64(rows)))
	}
	return strings.Join(parts, ", ")
}

// cpuSeconds sums utime+stime (clock ticks of 10 ms) per part.
func (ts *twoSites) cpuSeconds() map[string]float64 {
	out := map[string]float64{}
	pmPID := ""
	if b, err := os.ReadFile(filepath.Join(ts.Primary.Dir, "postmaster.pid")); err == nil {
		pmPID, _, _ = strings.Cut(string(b), "\n")
	}
	_, redisPort, _ := strings.Cut(ts.Redis.Addr, ":")
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid := ent.Name()
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state ppid ... utime(14) stime(15).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if len(f) < 13 {
			continue
		}
		ppid := f[1]
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		secs := (ut + st) / 100
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		args := strings.ReplaceAll(string(cmd), "\x00", " ")
		switch {
		case pid == strconv.Itoa(os.Getpid()):
			out["test"] += secs
		case pid == pmPID || ppid == pmPID:
			out["postgres"] += secs
		case strings.Contains(args, "redis-server") && strings.Contains(args, redisPort):
			out["redis"] += secs
		case strings.Contains(args, "-role worker"):
			if env, err := os.ReadFile("/proc/" + pid + "/environ"); err == nil && strings.Contains(string(env), "OPS_SITE_TYPE=secondary") {
				out["worker"] += secs
			}
		}
	}
	return out
}

// openLoop sends single-file registrations to base at rate per second for d, each at its
// scheduled time whatever the answers before it (open loop: latency counts from the scheduled
// time, so queueing is not hidden), over the load generator's fixed pool of connections (waiting
// for one counts). It returns the latencies of the 201s and the error count.
func openLoop(c *fasthttp.Client, base, token, eou string, rate int, d time.Duration, tag string) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	url, auth := base+"/raw_data_files/", "Bearer "+token
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	for i := range n {
		at := begin.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sendFile(c, url, auth, eou, fmt.Sprintf("bench/%s/%08d", tag, i)) {
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
