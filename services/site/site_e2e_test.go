package site_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/site"
)

func get(t *testing.T, url string, into any) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(into))
	return resp.StatusCode
}

func TestSiteEndpointsThroughTheGateway(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{
		"OPS_SITE_NAME": "FYST-test", "OPS_SUN_AVOIDANCE_DEG": "40", // a main site (secondary sites: sites_test.go)
	}})

	var info site.Info
	require.Equal(t, 200, get(t, s.GatewayURL+"/api/site/info", &info))
	require.Equal(t, "FYST-test", info.SiteName)
	require.Equal(t, "main", info.SiteType)
	require.InDelta(t, -22.985639, info.Location.LatitudeDeg, 1e-9)
	require.InDelta(t, -67.740278, info.Location.LongitudeDeg, 1e-9)
	require.InDelta(t, 5611.8, info.Location.ElevationM, 1e-9)
	require.Equal(t, site.ElevationLimits{MinDeg: 20, MaxDeg: 90}, info.ElevationLimits)
	require.Equal(t, 40.0, info.SunAvoidanceDeg)
	require.True(t, info.Buffering.CriticalOperationsBuffered)
	require.Equal(t, contract.IngestQueue, info.Buffering.Queue)
	require.Len(t, info.Buffering.BufferedOperations, len(contract.BufferedOperations()))
	require.Contains(t, info.Buffering.BufferedOperations, "POST /raw_data_files/bulk")
	require.NotEmpty(t, info.Version)
	requireNoInternals(t, s, rawGet(t, s.GatewayURL+"/api/site/info", ""))
	var none struct{ Status int }
	require.Equal(t, 404, get(t, s.GatewayURL+"/api/site/observatory", &none), "no OPS_OBSERVATORY_STATUS_URL: no observatory watched")
	require.Equal(t, 404, none.Status)

	var h site.Health
	require.Equal(t, 200, get(t, s.GatewayURL+"/health", &h))
	require.Equal(t, site.StatusOK, h.Status)
	require.Equal(t, "ok", h.Database.Status)
	require.Equal(t, "ok", h.Redis.Status)
	require.ElementsMatch(t, []string{"authtoken", "transfer", "catalog", "ingest"}, keys(h.Services))
	for name, c := range h.Services {
		require.Equal(t, "ok", c.Status, name)
		require.Equal(t, 200, c.HTTPStatus, name)
		require.Greater(t, c.LatencyMS, 0.0, name)
	}

	// Anonymous /health is cached: many callers, at most one check per second, so at most
	// about one /readyz per second reaches each service.
	readyz := func() float64 {
		return counter(t, s.URLs["authtoken"]+"/metrics", `obsops_http_requests_total{method="GET",route="/readyz",status="200"}`)
	}
	before, start := readyz(), time.Now()
	for range 50 {
		require.Equal(t, 200, get(t, s.GatewayURL+"/health", &h))
	}
	checks := readyz() - before
	require.LessOrEqual(t, checks, 2+time.Since(start).Seconds(), "50 requests in %s made %v checks", time.Since(start), checks)

	// A stopped service makes the suite degraded, not down, and is named; anonymous callers
	// learn that it is unreachable, not where it is; an admin gets the full error.
	require.NoError(t, s.Procs["catalog"].Stop(5*time.Second))
	require.Eventually(t, func() bool {
		return get(t, s.GatewayURL+"/health", &h) == 200 && h.Status == site.StatusDegraded
	}, 5*time.Second, 100*time.Millisecond, "within the cache time")
	require.Equal(t, "fail", h.Services["catalog"].Status)
	require.Equal(t, "unreachable", h.Services["catalog"].Error)
	require.Empty(t, h.Services["catalog"].Detail)
	require.Equal(t, "ok", h.Services["transfer"].Status)
	requireNoInternals(t, s, rawGet(t, s.GatewayURL+"/health", ""))
	requireNoInternals(t, s, rawGet(t, s.GatewayURL+"/health", "Bearer "+s.JWT(t, "viewer1", "viewer")))

	admin := s.JWT(t, "ops-admin", "admin")
	var full site.Health
	require.NoError(t, json.Unmarshal(rawGet(t, s.GatewayURL+"/health", "Bearer "+admin), &full))
	require.Equal(t, "fail", full.Services["catalog"].Status)
	require.Contains(t, full.Services["catalog"].Detail, strings.TrimPrefix(s.URLs["catalog"], "http://"),
		"an admin sees which address failed")
	metrics := string(rawGet(t, s.URLs["site"]+"/metrics", ""))
	require.Contains(t, metrics, `obsops_site_component_up{component="catalog"} 0`)
	require.Contains(t, metrics, `obsops_site_component_up{component="transfer"} 1`)

	// Without Redis nothing can be buffered: down, 503.
	s.Redis.Kill()
	require.Eventually(t, func() bool {
		return get(t, s.GatewayURL+"/health", &h) == 503 && h.Status == site.StatusDown
	}, 5*time.Second, 100*time.Millisecond)
	require.Equal(t, "fail", h.Redis.Status)
	requireNoInternals(t, s, rawGet(t, s.GatewayURL+"/health", ""))
}

// rawGet returns the body of a GET, sending authorization when given.
func rawGet(t *testing.T, url, authorization string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

// requireNoInternals checks that a body names no service's or Redis' or the database's address
// and no dial error.
func requireNoInternals(t *testing.T, s *testenv.Suite, body []byte) {
	t.Helper()
	leaks := []string{"dial tcp", "connection refused", "http://", s.Redis.Addr, "55432"}
	for _, u := range s.URLs {
		leaks = append(leaks, strings.TrimPrefix(u, "http://"))
	}
	for _, leak := range leaks {
		require.NotContains(t, string(body), leak)
	}
}

// counter reads one sample of a Prometheus text exposition (0 when absent).
func counter(t *testing.T, metricsURL, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(rawGet(t, metricsURL, "")), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestBufferStatsReadTheIngestQueue(t *testing.T) {
	// No ingest worker: tasks stay where the test puts them.
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"ingest"}})
	url := s.URLs["site"] + "/buffer-stats"

	// The buffer's failure gauges are exported from the start, at 0 (an alert on them needs the
	// series to exist before the first dead letter).
	metrics := s.URLs["site"] + "/metrics"
	require.Equal(t, 0.0, gauge(t, metrics, "obsops_site_buffer_dead_letters"))
	require.Equal(t, 0.0, gauge(t, metrics, "obsops_site_buffer_oldest_pending_age_seconds"))

	var st site.BufferStats
	require.Equal(t, 200, get(t, url, &st))
	require.NotNil(t, st.RevocationBoundS, "at the main site: OPS_TOKEN_CACHE_TTL")
	require.Equal(t, site.BufferStats{Site: st.Site, SiteType: "main", Queue: "ingest", MainDBReachable: true, MeasuredAt: st.MeasuredAt, Main: st.Main,
		RevocationBoundS: st.RevocationBoundS}, st, "an empty queue reports real zeros")
	require.True(t, st.Main.Reachable, "at the main site the main database is its own")
	require.Zero(t, st.Main.UnreachableSeconds)

	client := asynq.NewClientFromRedisClient(s.Redis.Client())
	for i := range 3 {
		_, err := client.Enqueue(asynq.NewTask("probe", []byte{byte(i)}), asynq.Queue("ingest"))
		require.NoError(t, err)
	}
	_, err := client.Enqueue(asynq.NewTask("probe", nil), asynq.Queue("ingest"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	info, err := client.Enqueue(asynq.NewTask("probe", []byte("dead")), asynq.Queue("ingest"))
	require.NoError(t, err)
	require.NoError(t, asynq.NewInspectorFromRedisClient(s.Redis.Client()).ArchiveTask("ingest", info.ID))

	time.Sleep(1100 * time.Millisecond) // let the oldest pending task age past a second
	require.Equal(t, 200, get(t, url, &st))
	require.Equal(t, 3, st.Pending)
	require.Equal(t, 1, st.Scheduled)
	require.Equal(t, 1, st.Archived)
	require.Equal(t, 0, st.Active)
	require.GreaterOrEqual(t, st.OldestPendingAgeS, 1.0)
	require.True(t, st.MainDBReachable)
	// The gauges follow within a sample interval (the monitor samples every 2 s, not per scrape).
	require.Eventually(t, func() bool {
		return gauge(t, metrics, "obsops_site_buffer_dead_letters") == 1 &&
			gauge(t, metrics, "obsops_site_buffer_oldest_pending_age_seconds") >= 1
	}, 3*site.SampleInterval, 100*time.Millisecond, "dead letters and the oldest pending write reach /metrics")
}

// gauge reads one unlabelled series from a Prometheus text exposition at url (-1: absent).
func gauge(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return -1
}
