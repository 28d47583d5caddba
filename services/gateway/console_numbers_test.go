package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/gateway"
)

// updateShown is one overview update as the console marked it (overview.js, performance mark
// "obsops:update-shown"): epoch milliseconds of the server's generated_at, the message's
// arrival, the DOM update and the next animation frame, and how many updates arriving before it
// were drawn over unseen.
type updateShown struct {
	Seq        int64   `json:"seq"`
	Generated  float64 `json:"generated"`
	Received   float64 `json:"received"`
	Painted    float64 `json:"painted"`
	Shown      float64 `json:"shown"`
	Superseded int     `json:"superseded"`
}

// updateAges is what the console showed of a stream of overview updates.
type updateAges struct {
	Updates    int           // updates shown during the run
	Rate       float64       // shown per second, between the first and the last shown update's generated_at
	Dropped    int           // updates that arrived but were drawn over before a frame showed them
	Age        []float64     // per update, ms from generated_at to the frame after its paint, sorted
	Arrival    []float64     // per update, ms from generated_at to the message's arrival, sorted
	Took       time.Duration // the run
	Registered int           // files registered to drive it
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func (u updateAges) String() string {
	return fmt.Sprintf("updates shown %d in %s (%.1f/s, %d registrations); age generated_at → on screen p50 %.0f ms, p99 %.0f ms, max %.0f ms; "+
		"arrival p50 %.0f ms, p99 %.0f ms; dropped (drawn over unseen) %d",
		u.Updates, u.Took.Round(time.Millisecond), u.Rate, u.Registered, pct(u.Age, .5), pct(u.Age, .99), u.maxAge(),
		pct(u.Arrival, .5), pct(u.Arrival, .99), u.Dropped)
}

func (u updateAges) maxAge() float64 {
	if len(u.Age) == 0 {
		return 0
	}
	return u.Age[len(u.Age)-1]
}

// measureUpdates drives the live overview the browser b shows (it must be signed in) with file
// registrations through the API at perSecond for d — the planner publishing an update at most
// every OPS_OVERVIEW_INTERVAL (100ms in the console stack: 10 a second) — and reads back from
// the page what it showed.
func measureUpdates(t *testing.T, cs *consoleStack, b *browser, d time.Duration, perSecond int) updateAges {
	t.Helper()
	b.goTo(t, "#/overview", `#live[data-state="live"]`)
	b.run(t, 5*time.Second, chromedp.Sleep(300*time.Millisecond),
		chromedp.Evaluate[chromedp.Void](`void performance.clearMarks("obsops:update-shown")`))
	var u updateAges
	// open loop: each registration is sent at its time by one of 8 senders, so a slow answer
	// (the machine is shared) does not slow the stream down
	due := make(chan string, 8)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for path := range due {
				body, _ := json.Marshal(map[string]any{"executed_obs_unit_id": cs.execution, "instrument_module_id": 31,
					"path": path, "size_bytes": 1000, "checksum": "sha256:" + strings.Repeat("ab", 32)})
				req, _ := http.NewRequest("POST", cs.GatewayURL+"/raw_data_files/", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+cs.instrument)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusCreated {
					failed.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	for time.Since(start) < d {
		cs.files++
		due <- fmt.Sprintf("2026-11-25/scan0002/f%05d.fits", cs.files)
		u.Registered++
		<-tick.C
	}
	tick.Stop()
	close(due)
	wg.Wait()
	require.Zero(t, failed.Load(), "every registration answered 201")
	b.run(t, 5*time.Second, chromedp.Sleep(700*time.Millisecond)) // the last updates reach the screen
	u.Took = time.Since(start)
	raw := get(t, b, 10*time.Second, chromedp.Evaluate[string](`JSON.stringify(performance.getEntriesByName("obsops:update-shown").map((e) => e.detail))`))
	var shown []updateShown
	require.NoError(t, json.Unmarshal([]byte(raw), &shown))
	for _, s := range shown {
		require.Greater(t, s.Generated, 0.0, "every update carries generated_at")
		u.Age = append(u.Age, s.Shown-s.Generated)
		u.Arrival = append(u.Arrival, s.Received-s.Generated)
		u.Dropped += s.Superseded
	}
	slices.Sort(u.Age)
	slices.Sort(u.Arrival)
	u.Updates = len(shown)
	if n := len(shown); n > 1 && shown[n-1].Generated > shown[0].Generated {
		u.Rate = float64(n-1) / ((shown[n-1].Generated - shown[0].Generated) / 1000)
	}
	return u
}

// TestBenchConsole measures the console's numbers in headless Chromium against the real suite:
// what a first visit transfers (gzip and brotli, budget 300 KB), the funnel's first render after
// navigation (budget 1 s, OPS_BENCH_CONSOLE_LOADS sign-ins in fresh browsers, default 3), and the
// live funnel at 10 updates a second for OPS_BENCH_SECONDS (default 10): the age of each update
// on screen, from the server's generated_at to the frame after its paint (p50, p99, max; budget
// 500 ms), its arrival, and the updates dropped (drawn over before any frame showed them). Run by
// `make bench` (OPS_BENCH=1); skipped otherwise.
func TestBenchConsole(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed: make test installs it (deploy/local/stack.sh test-deps)")
	}
	c, err := gateway.NewConsole()
	require.NoError(t, err)
	t.Logf("console assets: %d bytes gzip, %d bytes brotli (budget 300,000)", c.CompressedSize(), c.BrotliSize())

	cs := startConsoleStack(t)
	gwHost, idpHost := strings.TrimPrefix(cs.GatewayURL, "http://"), strings.TrimPrefix(cs.idp, "http://")
	var firsts []float64
	var alice *browser
	for range envInt("OPS_BENCH_CONSOLE_LOADS", 3) {
		alice = newBrowser(t, exe, gwHost, idpHost)
		alice.signIn(t, cs.GatewayURL, "alice", "wonderland")
		firsts = append(firsts, get(t, alice, 5*time.Second,
			chromedp.Evaluate[float64](`performance.getEntriesByName("obsops:funnel-rendered")[0].startTime`)))
	}
	slices.Sort(firsts)
	t.Logf("funnel first rendered after navigation: median %.0f ms, max %.0f ms over %d loads (budget 1,000 ms)",
		firsts[len(firsts)/2], firsts[len(firsts)-1], len(firsts))

	u := measureUpdates(t, cs, alice, time.Duration(envInt("OPS_BENCH_SECONDS", 10))*time.Second, 20)
	t.Logf("live funnel at 10 updates/s: %s (budget: max age 500 ms)", u)
	require.LessOrEqual(t, c.BrotliSize(), 300_000)
	require.LessOrEqual(t, c.CompressedSize(), 300_000)
	require.Less(t, firsts[len(firsts)-1], 1000.0)
	require.LessOrEqual(t, u.maxAge(), 500.0)
}
