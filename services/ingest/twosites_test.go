package ingest_test

// The two-site topology of DESIGN §3, built for real on one machine (needs root: the private
// PostgreSQL clusters run as the postgres user). Everything that builds or disturbs it lives in
// this file, so other tests (TestTwoSitesWANCut, the site fault tests, the replay benchmarks)
// share one builder:
//
//	ts := startTwoSites(t, twoSitesOptions{})
//	ts.cutWAN() / ts.restoreWAN(t) / ts.slowWAN(t, latency, resetToxicity) / ts.healWAN(t)
//	ts.killSecondaryWorker() / ts.startSecondaryWorker(t), ts.secRedis.Kill() / .Start()
//	ts.restartPrimary(t), ts.pauseReplay(t) / ts.resumeReplay(t)
//	ts.main (the main site's suite, database and token), ts.secondary (the secondary's API URL),
//	ts.replica (the secondary's replica, read-only)

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// twoSites is a main site (a private PostgreSQL primary and the suite on it) and a secondary
// site (a streaming read replica of that primary made with pg_basebackup -R, its own Redis, an
// ingest API and an ingest worker with OPS_SITE_TYPE=secondary). The secondary's traffic to the
// primary — the replica's streaming and the worker's replay — passes through one TCP proxy, the
// WAN (in-process toxiproxy).
type twoSites struct {
	main         *env       // the main site: suite (gateway, authtoken, ingest, site) on the primary
	primary      *privatePG // the main site's PostgreSQL
	wan          *toxiproxy.Proxy
	replica      *sql.DB // the secondary's replica, the test's database on it
	replicaPG    *privatePG
	secondary    string // the secondary's ingest API base URL
	secRedis     *testenv.RedisServer
	secAPI       *testenv.Process
	secWorker    *testenv.Process
	secWorkerURL string            // its HTTP address (/metrics, /readyz)
	secEnv       map[string]string // the secondary's ingest settings (API and worker)
}

// twoSitesOptions tunes startTwoSites.
type twoSitesOptions struct {
	// Secondary adds or overrides settings of the secondary's ingest processes.
	Secondary map[string]string
	// Main adds or overrides settings of the main site's suite.
	Main map[string]string
}

// startTwoSites builds the topology; everything is stopped and removed at the test's end.
func startTwoSites(t *testing.T, opts twoSitesOptions) *twoSites {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run private PostgreSQL clusters as the postgres user")
	}
	primary := startPrivatePostgres(t) // initdb defaults: wal_level=replica, replication trusted on 127.0.0.1
	t.Setenv("OPS_TEST_DATABASE_URL", primary.url)
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	for k, v := range opts.Main {
		vars[k] = v
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "catalog"}})
	ts := &twoSites{main: envFor(t, s), primary: primary}

	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	ts.wan = toxiproxy.NewProxy(srv, "wan", "127.0.0.1:0", "127.0.0.1:"+primary.port)
	require.NoError(t, ts.wan.Start())
	t.Cleanup(ts.wan.Stop)
	_, wanPort, _ := strings.Cut(ts.wan.Listen, ":")

	// The replica, cloned and streaming through the WAN.
	dir := strings.TrimSuffix(primary.dir, "/data") + "/replica"
	out, err := exec.Command("runuser", "-u", "postgres", "--", pgBin("pg_basebackup"), "-D", dir, "-R", "-X", "stream", "-c", "fast",
		"-d", "host=127.0.0.1 port="+wanPort+" user=postgres").CombinedOutput()
	require.NoError(t, err, "pg_basebackup: %s", out)
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	ts.replicaPG = &privatePG{dir: dir, port: port}
	ts.replicaPG.ctl(t, "start", "-w")
	t.Cleanup(func() {
		_ = exec.Command("runuser", "-u", "postgres", "--", pgBin("pg_ctl"), "-D", dir, "stop", "-m", "immediate").Run()
	})
	mainURL, err := url.Parse(s.DatabaseURL)
	require.NoError(t, err)
	replicaURL, viaWAN := *mainURL, *mainURL
	replicaURL.Host, viaWAN.Host = "127.0.0.1:"+port, ts.wan.Listen
	ts.replica, err = sql.Open("postgres", replicaURL.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.replica.Close() })
	var inRecovery bool
	require.NoError(t, ts.replica.QueryRow(`SELECT pg_is_in_recovery()`).Scan(&inRecovery))
	require.True(t, inRecovery, "the replica must be a standby")
	require.Eventually(t, func() bool {
		var n int
		return ts.replica.QueryRow(`SELECT count(*) FROM obs_units WHERE id = $1`, ts.main.obsUnit).Scan(&n) == nil && n == 1
	}, 30*time.Second, 100*time.Millisecond, "the replica never received the planned obs unit")

	ts.secRedis = testenv.Redis(t)
	ts.secEnv = map[string]string{
		"OPS_SITE_TYPE": "secondary", "OPS_SITE_NAME": "observatory",
		"OPS_DATABASE_URL": replicaURL.String(), "OPS_MAIN_DATABASE_URL": viaWAN.String(),
		"OPS_REDIS_URL": ts.secRedis.URL,
	}
	for k, v := range opts.Secondary {
		ts.secEnv[k] = v
	}
	ts.secAPI, ts.secondary = ingestProc(t, s, "api", ts.secEnv)
	ts.startSecondaryWorker(t)
	return ts
}

// cutWAN drops every connection through the WAN and refuses new ones.
func (ts *twoSites) cutWAN() { ts.wan.Stop() }

// restoreWAN listens again on the same address.
func (ts *twoSites) restoreWAN(t *testing.T) { require.NoError(t, ts.wan.Start()) }

// slowWAN adds latency (± latency/6 jitter) in both directions and resets a share of the
// connections (toxicity: each new connection is reset after 2 s with that probability).
func (ts *twoSites) slowWAN(t *testing.T, latency time.Duration, resetToxicity float64) {
	t.Helper()
	ms := latency.Milliseconds()
	for _, stream := range []string{"upstream", "downstream"} {
		_, err := ts.wan.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"latency-%s","type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, stream, stream, ms/2, ms/12)))
		require.NoError(t, err)
	}
	if resetToxicity > 0 {
		_, err := ts.wan.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"loss","type":"reset_peer","stream":"upstream","toxicity":%g,"attributes":{"timeout":2000}}`, resetToxicity)))
		require.NoError(t, err)
	}
}

// healWAN removes every toxic.
func (ts *twoSites) healWAN(t *testing.T) { ts.wan.Toxics.ResetToxics(t.Context()) }

// startSecondaryWorker starts the secondary's ingest worker (again).
func (ts *twoSites) startSecondaryWorker(t *testing.T) {
	t.Helper()
	ts.secWorker, ts.secWorkerURL = ingestProc(t, ts.main.s, "worker", ts.secEnv)
}

// killSecondaryWorker kills the secondary's worker with SIGKILL.
func (ts *twoSites) killSecondaryWorker() {
	ts.secWorker.Signal(os.Kill)
	_, _ = ts.secWorker.Wait(10 * time.Second)
}

// restartPrimary stops the main PostgreSQL in immediate mode (a crash: every connection dropped,
// recovery at start) and starts it again.
func (ts *twoSites) restartPrimary(t *testing.T) {
	t.Helper()
	ts.primary.ctl(t, "stop", "-m", "immediate")
	ts.primary.ctl(t, "start", "-w")
}

// pauseReplay holds the replica's WAL replay (it keeps receiving); resumeReplay lets it go on.
func (ts *twoSites) pauseReplay(t *testing.T) {
	t.Helper()
	_, err := ts.replica.Exec(`SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
}

func (ts *twoSites) resumeReplay(t *testing.T) {
	t.Helper()
	_, err := ts.replica.Exec(`SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
}

// privatePG is a PostgreSQL cluster of the test's own, run as the postgres user.
type privatePG struct {
	dir, port, url string
}

func (p *privatePG) ctl(t *testing.T, args ...string) {
	t.Helper()
	all := append([]string{"-u", "postgres", "--", pgBin("pg_ctl"), "-D", p.dir, "-l", filepath.Join(p.dir, "log")}, args...)
	if args[0] == "start" {
		all = append(all, "-o", "-p "+p.port+" -k /tmp -c listen_addresses=127.0.0.1")
	}
	out, err := exec.Command("runuser", all...).CombinedOutput()
	require.NoError(t, err, "pg_ctl %v: %s", args, out)
}

func pgBin(name string) string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return name
	}
	return matches[len(matches)-1]
}

// startPrivatePostgres runs a PostgreSQL cluster of the test's own (the shared one must never be
// stopped), as the postgres user, under /var/tmp.
func startPrivatePostgres(t *testing.T) *privatePG {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "obsops-chaos-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, exec.Command("chown", "postgres", dir).Run())
	out, err := exec.Command("runuser", "-u", "postgres", "--", pgBin("initdb"), "-D", dir+"/data", "-A", "trust", "-U", "postgres").CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	p := &privatePG{dir: dir + "/data", port: port, url: "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"}
	p.ctl(t, "start", "-w")
	t.Cleanup(func() {
		_ = exec.Command("runuser", "-u", "postgres", "--", pgBin("pg_ctl"), "-D", p.dir, "stop", "-m", "immediate").Run()
	})
	return p
}
