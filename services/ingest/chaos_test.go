package ingest_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv/twosites"
)

// The long fault tests (`make chaos`, several minutes each) run only with OPS_CHAOS=1.
func chaos(t *testing.T) {
	if os.Getenv("OPS_CHAOS") != "1" {
		t.Skip("long fault test: run with `make chaos` (OPS_CHAOS=1)")
	}
}

func chaosSeconds(def int) time.Duration {
	if v := os.Getenv("OPS_CHAOS_SECONDS"); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return time.Duration(def) * time.Second
}

// leaks fails if asynq holds active tasks or leases at the end (a task lost between workers).
func (e *env) requireNoActive(t *testing.T) {
	t.Helper()
	rdb := e.s.Redis.Client()
	require.Eventually(t, func() bool {
		return rdb.LLen(context.Background(), "asynq:{ingest}:active").Val() == 0 &&
			rdb.ZCard(context.Background(), "asynq:{ingest}:lease").Val() == 0
	}, 2*time.Minute, 500*time.Millisecond, "active tasks or leases left over")
	require.Zero(t, rdb.ZCard(context.Background(), "asynq:{ingest}:archived").Val(), "dead letters")
}

// TestChaosWANDropped puts a TCP proxy between the worker and PostgreSQL and drops all traffic
// for 2 minutes (connections stay open, data vanishes: the worst case of a WAN cut) under load:
// writes keep being acknowledged, nothing is lost or doubled, the backlog drains once the link is
// back, and no task is left active without a lease.
func TestChaosWANDropped(t *testing.T) {
	chaos(t)
	e := newSplitEnv(t)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	pgURL, err := url.Parse(e.s.DatabaseURL)
	require.NoError(t, err)
	proxy := toxiproxy.NewProxy(srv, "wan", "127.0.0.1:0", pgURL.Host)
	require.NoError(t, proxy.Start())
	t.Cleanup(proxy.Stop)
	viaProxy := *pgURL
	viaProxy.Host = proxy.Listen
	ingestProc(t, e.s, "worker", map[string]string{"OPS_MAIN_DATABASE_URL": viaProxy.String()})

	eou := e.start(t, startBody(e.obsUnit)).ID
	ctx, stop := context.WithCancel(context.Background())
	lg := runLoad(ctx, t, e, eou, 4, 25, &fault{})
	time.Sleep(10 * time.Second)
	_, err = proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"drop-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`))
	require.NoError(t, err)
	_, err = proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"drop-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`))
	require.NoError(t, err)
	t.Log("WAN dropping all traffic")
	time.Sleep(chaosSeconds(120))
	require.NoError(t, proxy.Toxics.RemoveToxic(context.Background(), "drop-down"))
	require.NoError(t, proxy.Toxics.RemoveToxic(context.Background(), "drop-up"))
	t.Log("WAN back")
	time.Sleep(10 * time.Second)
	stop()
	lg.wg.Wait()
	verdict(t, e, lg, 3*time.Minute)
	e.requireNoActive(t)
}

// TestChaosRedisOutOfMemory lowers Redis' maxmemory below its use (noeviction) under load: writes
// are answered 503, never 201 for a write Redis did not take, nothing is evicted; once memory is
// back everything acknowledged is applied.
func TestChaosRedisOutOfMemory(t *testing.T) {
	chaos(t)
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	rdb := e.s.Redis.Client()
	ctx, stop := context.WithCancel(context.Background())
	lg := runLoad(ctx, t, e, eou, 4, 25, &fault{})
	time.Sleep(3 * time.Second)
	require.NoError(t, rdb.ConfigSet(context.Background(), "maxmemory", "1mb").Err())
	t.Log("Redis out of memory")
	time.Sleep(chaosSeconds(20))
	require.NoError(t, rdb.ConfigSet(context.Background(), "maxmemory", "0").Err())
	time.Sleep(3 * time.Second)
	stop()
	lg.wg.Wait()
	lg.mu.Lock()
	n503 := lg.statuses[503]
	lg.mu.Unlock()
	require.Positive(t, n503, "an out-of-memory Redis must refuse writes (503)")
	info := rdb.Info(context.Background(), "stats").Val()
	require.Contains(t, info, "evicted_keys:0\r", "noeviction: nothing may be evicted")
	verdict(t, e, lg, time.Minute)
	e.requireNoActive(t)
}

// TestChaosPostgresStopped stops a private PostgreSQL (immediate mode) for 60 s under load, then
// starts it again: the backlog drains by itself, nothing is lost, doubled or dead-lettered.
func TestChaosPostgresStopped(t *testing.T) {
	chaos(t)
	pg := twosites.PrivatePostgres(t)
	t.Setenv("OPS_TEST_DATABASE_URL", pg.URL)
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	ctx, stop := context.WithCancel(context.Background())
	lg := runLoad(ctx, t, e, eou, 4, 25, &fault{})
	time.Sleep(5 * time.Second)
	pg.Ctl(t, "stop", "-m", "immediate")
	t.Log("PostgreSQL stopped")
	time.Sleep(chaosSeconds(60))
	pg.Ctl(t, "start", "-w")
	t.Log("PostgreSQL started")
	time.Sleep(10 * time.Second)
	stop()
	lg.wg.Wait()
	verdict(t, e, lg, 3*time.Minute)
	e.requireNoActive(t)
}
