package site_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

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
		"OPS_SITE_NAME": "FYST-test", "OPS_SITE_TYPE": "secondary", "OPS_SUN_AVOIDANCE_DEG": "40",
	}})

	var info site.Info
	require.Equal(t, 200, get(t, s.GatewayURL+"/api/site/info", &info))
	require.Equal(t, "FYST-test", info.SiteName)
	require.Equal(t, "secondary", info.SiteType)
	require.InDelta(t, -22.985639, info.Location.LatitudeDeg, 1e-9)
	require.InDelta(t, -67.740278, info.Location.LongitudeDeg, 1e-9)
	require.InDelta(t, 5611.8, info.Location.ElevationM, 1e-9)
	require.Equal(t, site.ElevationLimits{MinDeg: 20, MaxDeg: 90}, info.ElevationLimits)
	require.Equal(t, 40.0, info.SunAvoidanceDeg)
	require.True(t, info.Buffering.CriticalOperationsBuffered)
	require.Len(t, info.Buffering.BufferedOperations, 5)
	require.NotEmpty(t, info.Version)

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

	// A stopped service makes the suite degraded, not down, and is named.
	require.NoError(t, s.Procs["catalog"].Stop(5*time.Second))
	require.Equal(t, 200, get(t, s.GatewayURL+"/health", &h))
	require.Equal(t, site.StatusDegraded, h.Status)
	require.Equal(t, "fail", h.Services["catalog"].Status)
	require.Contains(t, h.Services["catalog"].Error, "unreachable")
	require.Equal(t, "ok", h.Services["transfer"].Status)

	// Without Redis nothing can be buffered: down, 503.
	s.Redis.Kill()
	require.Equal(t, 503, get(t, s.GatewayURL+"/health", &h))
	require.Equal(t, site.StatusDown, h.Status)
	require.Equal(t, "fail", h.Redis.Status)
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

	var st site.BufferStats
	require.Equal(t, 200, get(t, url, &st))
	require.Equal(t, site.BufferStats{Site: st.Site, SiteType: "main", Queue: "ingest", MainDBReachable: true, MeasuredAt: st.MeasuredAt}, st,
		"an empty queue reports real zeros")

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
}
