package gateway_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/testenv"
)

// benchResult is one measured phase against one target.
type benchResult struct {
	name     string
	requests int
	errors   int
	elapsed  time.Duration
	lat      []time.Duration // sorted once all rounds are in
	cpu      map[string]time.Duration
}

// add merges another measurement of the same target.
func (r benchResult) add(o benchResult) benchResult {
	r.name = o.name
	r.requests += o.requests
	r.errors += o.errors
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	if r.cpu == nil {
		r.cpu = map[string]time.Duration{}
	}
	for k, v := range o.cpu {
		r.cpu[k] += v
	}
	return r
}

func (r benchResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

func (r benchResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(float64(len(r.lat))*p))]
}

// cpuPerRequest is the CPU time process name spent per answered request, in microseconds.
func (r benchResult) cpuPerRequest(name string) float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.cpu[name].Microseconds()) / float64(r.requests)
}

// clientRequests is how many requests one client address sends before the load generator
// moves on to a new one: under the gateway's default budget (OPS_RATE_LIMIT_PER_MINUTE, 1200 in
// any sliding minute, less one lease), so the gateway as configured by default can be measured
// with its rate limiter on and no request refused. Each client then spends its leases in full,
// the limiter's usual cost per request.
const clientRequests = 1000

// clientAddrs hands out loopback source addresses (127.1.0.1 onwards; Linux routes the whole of
// 127.0.0.0/8 to the loopback interface), each to one client: one connection that sends
// clientRequests requests.
type clientAddrs struct{ next atomic.Uint32 }

// take returns an address no client has used yet in this test.
func (a *clientAddrs) take() net.IP {
	n := a.next.Add(1) - 1
	return net.IPv4(127, byte(1+n/(256*254)), byte(n/254), byte(1+n%254))
}

// load runs concurrency closed-loop workers against url for d and returns the throughput and
// latency distribution. Each worker is a sequence of clients: a keep-alive connection from its
// own loopback address (addrs) that sends clientRequests requests and closes, so every target
// sees the same traffic and the gateway's rate limiter keys each client apart.
func load(t *testing.T, name, url string, concurrency int, d time.Duration, addrs *clientAddrs) benchResult {
	t.Helper()
	uri := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(uri)
	if err := uri.Parse(nil, []byte(url)); err != nil {
		t.Fatal(err)
	}
	host := string(uri.Host())
	deadline := time.Now().Add(d)
	perWorker := int(100_000*d.Seconds())/concurrency + 1024 // room for 100k req/s without regrowing
	lats := make([][]time.Duration, concurrency)
	errs := make([]int, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var source net.IP
			hc := &fasthttp.HostClient{Addr: host, MaxConns: 1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
				Dial: func(addr string) (net.Conn, error) {
					return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: source}, Timeout: 5 * time.Second}).Dial("tcp", addr)
				}}
			defer hc.CloseIdleConnections()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(url)
			own := make([]time.Duration, 0, perWorker)
			for sent := 0; time.Now().Before(deadline); sent++ {
				if sent%clientRequests == 0 { // the next client: a new address and connection
					hc.CloseIdleConnections()
					source = addrs.take()
				}
				t0 := time.Now()
				err := hc.Do(req, resp)
				el := time.Since(t0)
				if err != nil || resp.StatusCode() != 200 {
					errs[w]++
					continue
				}
				own = append(own, el)
			}
			lats[w] = own
		}()
	}
	wg.Wait()
	r := benchResult{name: name, elapsed: time.Since(start)}
	for w := range concurrency {
		r.lat = append(r.lat, lats[w]...)
		r.errors += errs[w]
	}
	r.requests = len(r.lat)
	return r
}

// findProcess returns the pid of the process running binary whose environment holds envKV
// (Linux /proc), or 0.
func findProcess(binary, envKV string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil || string(bytes.SplitN(cmd, []byte{0}, 2)[0]) != binary {
			continue
		}
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return string(kv) == envKV }) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		return pid
	}
	return 0
}

// processCPU is the user+system CPU time a process has used so far (0 if unknown).
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * (time.Second / 100) // USER_HZ
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

// envInts reads a comma-separated list of positive integers, or returns def.
func envInts(name string, def []int) []int {
	var out []int
	for _, f := range strings.Split(os.Getenv(name), ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return def
		}
		out = append(out, v)
	}
	return out
}

// TestBenchGatewayOverhead measures GET /api/site/info directly at the site service and through
// the gateway, in one run on loopback. The headline row is the gateway as configured by default
// (its rate limiter on, with the default budget); the other gateways each change one setting and
// are labelled by it (rate limiter off; upstream pipelining off). Every target gets the same
// traffic: clients of clientRequests requests each, each from its own address (see load), so the
// default budget refuses none. Throughput is each target's peak over a sweep of closed-loop
// connection counts: at a fixed count a longer path is limited by its latency before it runs out
// of CPU, so only the peaks compare capacity; the whole sweep is printed. It also prints p50/p99,
// the CPU each process spent per request, how many requests each upstream write carried, a
// sequential latency phase, and the verdicts against the targets (the gateway keeps >= 60% of
// direct throughput and adds <= 1 ms at p50). Run by `make bench` (OPS_BENCH=1); skipped
// otherwise. OPS_BENCH_SECONDS, OPS_BENCH_CONNECTIONS and OPS_BENCH_LOG_LEVEL adjust it.
func TestBenchGatewayOverhead(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	dur := time.Duration(envInt("OPS_BENCH_SECONDS", 5)) * time.Second
	sweep := envInts("OPS_BENCH_CONNECTIONS", []int{16, 32, 64, 128, 256})
	logLevel := os.Getenv("OPS_BENCH_LOG_LEVEL")
	if logLevel == "" {
		logLevel = "info" // production default: one access-log line per request and service
	}
	// The suite's gateway keeps every default (OPS_LOG_LEVEL aside, which applies to all targets).
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_LOG_LEVEL": logLevel}})
	unlimited, _ := startGateway(t, s, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0"})
	unpipelined, _ := startGateway(t, s, map[string]string{"OPS_UPSTREAM_PIPELINE_DEPTH": "1"})

	const (
		headline    = "gateway (default config: rate limiter on)"
		noLimiter   = "gateway, rate limiter off"
		noPipelines = "gateway, upstream pipelining off"
	)
	gatewayPid := func(url string) int {
		return findProcess(testenv.Binary(t, "gateway"), "OPS_GATEWAY_ADDR="+strings.TrimPrefix(url, "http://"))
	}
	pids := map[string]int{
		"loadgen":   os.Getpid(),
		"site":      findProcess(testenv.Binary(t, "site"), "OPS_SITE_ADDR="+strings.TrimPrefix(s.URLs["site"], "http://")),
		headline:    gatewayPid(s.GatewayURL),
		noLimiter:   gatewayPid(unlimited),
		noPipelines: gatewayPid(unpipelined),
	}
	targets := []struct{ name, url, proxy string }{
		{"direct (site)", s.URLs["site"] + "/api/site/info", ""},
		{headline, s.GatewayURL + "/api/site/info", headline},
		{noLimiter, unlimited + "/api/site/info", noLimiter},
		{noPipelines, unpipelined + "/api/site/info", noPipelines},
	}
	var addrs clientAddrs
	measure := func(i, concurrency int, d time.Duration) benchResult {
		tg := targets[i]
		procs := []string{"loadgen", "site"}
		if tg.proxy != "" {
			procs = append(procs, tg.proxy)
		}
		before := map[string]time.Duration{}
		for _, p := range procs {
			before[p] = processCPU(pids[p])
		}
		r := load(t, tg.name, tg.url, concurrency, d, &addrs)
		r.cpu = map[string]time.Duration{}
		for _, p := range procs {
			name := p
			if p == tg.proxy {
				name = "proxy"
			}
			r.cpu[name] = processCPU(pids[p]) - before[p]
		}
		return r
	}
	for i := range targets { // warm up connections, pools and caches
		measure(i, sweep[len(sweep)-1], time.Second)
	}
	// Cells are measured in interleaved rounds of one second, so that a change of background load
	// on the machine affects every target alike instead of skewing the ratios.
	rounds := max(1, int(dur/time.Second))
	thr := make([][]benchResult, len(targets)) // [target][connection count]
	for i := range targets {
		thr[i] = make([]benchResult, len(sweep))
	}
	seq := make([]benchResult, len(targets))
	metricsURL := "http://" + s.Env["OPS_GATEWAY_METRICS_ADDR"] + "/metrics"
	const (
		pipelinedSeries = `obsops_gateway_upstream_pipelined_total{service="site"}`
		writesSeries    = `obsops_gateway_upstream_writes_total{service="site"}`
	)
	pipelinedBefore, writesBefore := counter(t, metricsURL, pipelinedSeries), counter(t, metricsURL, writesSeries)
	for range rounds {
		for j, conns := range sweep {
			for i := range targets {
				thr[i][j] = thr[i][j].add(measure(i, conns, dur/time.Duration(rounds)))
			}
		}
	}
	pipelined := counter(t, metricsURL, pipelinedSeries) - pipelinedBefore
	writes := counter(t, metricsURL, writesSeries) - writesBefore
	for range rounds {
		for i := range targets {
			seq[i] = seq[i].add(measure(i, 1, dur/time.Duration(rounds)))
		}
	}
	peak := make([]int, len(targets)) // index into sweep of each target's highest throughput
	for i := range targets {
		for j := range sweep {
			slices.Sort(thr[i][j].lat)
			if thr[i][j].rps() > thr[i][peak[i]].rps() {
				peak[i] = j
			}
		}
		slices.Sort(seq[i].lat)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nGET /api/site/info on loopback, %d CPUs, OPS_LOG_LEVEL=%s, %s per cell (interleaved 1 s rounds), %d requests per client address and connection\n",
		runtime.NumCPU(), logLevel, dur, clientRequests)
	width := len("p50 ms at connections")
	for _, tg := range targets {
		width = max(width, len(tg.name))
	}
	table := func(title string, cell func(r benchResult) string, ratio func(j int) string) {
		fmt.Fprintf(&b, "  %-*s", width, title)
		for _, conns := range sweep {
			fmt.Fprintf(&b, " %9d", conns)
		}
		b.WriteString("\n")
		for i, tg := range targets {
			fmt.Fprintf(&b, "  %-*s", width, tg.name)
			for j := range sweep {
				fmt.Fprintf(&b, " %9s", cell(thr[i][j]))
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  %-*s", width, "default gateway vs direct")
		for j := range sweep {
			fmt.Fprintf(&b, " %9s", ratio(j))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "throughput phase: closed-loop keep-alive connections (each a new client every %d requests)\n", clientRequests)
	table("req/s at connections", func(r benchResult) string { return fmt.Sprintf("%.0f", r.rps()) },
		func(j int) string { return fmt.Sprintf("%.0f%%", 100*thr[1][j].rps()/thr[0][j].rps()) })
	table("p50 ms at connections", func(r benchResult) string { return fmt.Sprintf("%.3f", float64(r.pct(0.50).Microseconds())/1000) },
		func(j int) string { return "+" + ms(thr[1][j].pct(0.50)-thr[0][j].pct(0.50)) })
	row := func(r benchResult, conns int) {
		fmt.Fprintf(&b, "  %-*s %4d conns %8.0f req/s  p50 %9s  p99 %9s  errors %d   CPU µs/request: client %5.1f  proxy %5.1f  site %5.1f\n",
			width, r.name, conns, r.rps(), ms(r.pct(0.50)), ms(r.pct(0.99)), r.errors, r.cpuPerRequest("loadgen"), r.cpuPerRequest("proxy"), r.cpuPerRequest("site"))
	}
	fmt.Fprintf(&b, "each target at its peak:\n")
	for i := range targets {
		row(thr[i][peak[i]], sweep[peak[i]])
	}
	requests := 0
	for j := range sweep {
		requests += thr[1][j].requests
	}
	fmt.Fprintf(&b, "  (%s: %.0f%% of its requests were pipelined behind others on an upstream connection; %.1f requests per upstream write)\n",
		headline, 100*pipelined/float64(requests), float64(requests)/writes)
	fmt.Fprintf(&b, "latency phase: 1 connection, sequential requests (per-request cost without queueing)\n")
	for _, r := range seq {
		row(r, 1)
	}
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	total := func(r benchResult) float64 {
		return r.cpuPerRequest("loadgen") + r.cpuPerRequest("proxy") + r.cpuPerRequest("site")
	}
	direct := thr[0][peak[0]]
	for i := 1; i < len(targets); i++ {
		g, gs := thr[i][peak[i]], seq[i]
		ratio := g.rps() / direct.rps()
		added := gs.pct(0.50) - seq[0].pct(0.50)
		fmt.Fprintf(&b, "%s: peak throughput %.0f%% of direct peak (target >= 60%%) %s; p50 added %s sequential (target <= 1 ms) %s",
			targets[i].name, 100*ratio, verdict(ratio >= 0.60), ms(added), verdict(added <= time.Millisecond))
		if total(g) > 0 {
			fmt.Fprintf(&b, "; CPU per request at peak %.0f µs vs %.0f µs direct (throughput ratio if CPU-bound: %.0f%%)", total(g), total(direct), 100*total(direct)/total(g))
		}
		b.WriteString("\n")
	}
	fmt.Print(b.String())
	for _, r := range append(slices.Concat(thr...), seq...) {
		if r.requests == 0 || float64(r.errors) > 0.001*float64(r.requests+r.errors) {
			t.Errorf("%s: %d errors in %d requests", r.name, r.errors, r.requests+r.errors)
		}
	}
}
