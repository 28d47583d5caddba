package catalog_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCostlyRequestsAreBounded: one viewer's parallel long visibility requests get at most their
// share of a replica (one at a time here; the rest 429 with Retry-After), while another user's
// reads keep their latency and that user's own costly request still runs. Through the gateway,
// with its default rate limit.
func TestCostlyRequestsAreBounded(t *testing.T) {
	e := startEnv(t, map[string]string{"OPS_CATALOG_COSTLY_PER_USER": "1", "OPS_CATALOG_COSTLY_PER_REPLICA": "2"})
	r := e.call(t, http.MethodPost, e.gw("/sources/"), e.admin, map[string]any{"name": "costly-src", "kind": "fixed", "ra_deg": 101.3, "dec_deg": -16.7})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var src struct{ ID int64 }
	r.JSON(t, &src)
	long := e.gw(fmt.Sprintf("/visibility/%d?start=2026-01-01T00:00:00Z&end=2026-01-07T22:00:00Z&step_s=60", src.ID)) // 9,961 samples

	stop := time.Now().Add(4 * time.Second)
	var mu sync.Mutex
	statuses := map[int]int{}
	bounded := 0 // 429s of the cost bound (others are the gateway's rate limit)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			for time.Now().Before(stop) {
				req, _ := http.NewRequest(http.MethodGet, long, nil)
				req.Header.Set("Authorization", "Bearer "+e.viewer)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "costly requests") {
					bounded++
				}
				mu.Unlock()
				if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
					require.NotEmpty(t, resp.Header.Get("Retry-After"))
				}
			}
		}()
	}
	// Meanwhile another user reads a source, and runs one long request of their own.
	time.Sleep(200 * time.Millisecond)
	own := e.call(t, http.MethodGet, long, e.observer, nil)
	require.Equal(t, http.StatusOK, own.Status, "another user's costly request has room: %s", own.Body)
	var lat []time.Duration
	for time.Now().Before(stop) {
		t0 := time.Now()
		r := e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/sources/%d", src.ID)), e.observer, nil)
		lat = append(lat, time.Since(t0))
		require.Equal(t, http.StatusOK, r.Status)
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	slices.Sort(lat)
	p95 := lat[len(lat)*95/100]
	t.Logf("viewer's answers %v; other user's GET /sources/{id}: %d reads, p50 %v, p95 %v", statuses, len(lat), lat[len(lat)/2], p95)
	require.Positive(t, statuses[http.StatusOK], "the viewer's requests run, one at a time")
	require.Positive(t, bounded, "the viewer's parallel requests beyond their share are refused")
	require.Less(t, p95, 200*time.Millisecond, "another user's reads keep their latency (409 ms p95 before the bound)")
}
