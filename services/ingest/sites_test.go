package ingest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// twoSites is the two-site topology of DESIGN §3 on one machine: a main site (a private
// PostgreSQL primary and the suite on it) and a secondary site (a streaming read replica of that
// primary made with pg_basebackup -R, its own Redis, and an ingest process with
// OPS_SITE_TYPE=secondary). The secondary's traffic to the primary — the replica's streaming and
// the ingest worker's replay — passes through one TCP proxy, the WAN.
type twoSites struct {
	main       *env
	wan        *toxiproxy.Proxy
	replica    *sql.DB // the secondary's replica, the test's database on it
	replicaPG  *privatePG
	secondary  string // the secondary's ingest base URL
	secRedisDB *testenv.RedisServer
}

// cutWAN drops every connection through the WAN and refuses new ones.
func (ts *twoSites) cutWAN() { ts.wan.Stop() }

// restoreWAN listens again on the same address.
func (ts *twoSites) restoreWAN(t *testing.T) { require.NoError(t, ts.wan.Start()) }

func startTwoSites(t *testing.T) *twoSites {
	t.Helper()
	primary := startPrivatePostgres(t) // initdb defaults: wal_level=replica, replication trusted on 127.0.0.1
	t.Setenv("OPS_TEST_DATABASE_URL", primary.url)
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "catalog"}})
	ts := &twoSites{main: envFor(t, s)}

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

	ts.secRedisDB = testenv.Redis(t)
	_, ts.secondary = ingestProc(t, s, "all", map[string]string{
		"OPS_SITE_TYPE": "secondary", "OPS_SITE_NAME": "observatory",
		"OPS_DATABASE_URL": replicaURL.String(), "OPS_MAIN_DATABASE_URL": viaWAN.String(),
		"OPS_REDIS_URL": ts.secRedisDB.URL,
	})
	return ts
}

// secFile is what a read at the secondary answers for a file.
type secFile struct {
	ID           string `json:"id"`
	Path         string `json:"path"`
	BufferStatus string `json:"buffer_status"`
}

// TestTwoSitesWANCut: with the WAN cut, an instrument registers files at the secondary and gets
// 201s; reads at the secondary see every acknowledged record at every moment; with the WAN back
// everything reaches the main primary (0 lost, 0 duplicated), each record is "committed" while
// the secondary's replica has not replayed it (replay paused: the cache keeps it) and ends
// "replicated", as do the receipts.
func TestTwoSitesWANCut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run private PostgreSQL clusters as the postgres user")
	}
	begin := time.Now()
	ts := startTwoSites(t)
	t.Logf("two sites up in %s", time.Since(begin).Round(time.Millisecond))
	e := ts.main
	c := &http.Client{Timeout: 10 * time.Second}
	sec := func(method, path string, body any) response {
		return doURL(t, c, method, ts.secondary+path, e.token, body)
	}

	ts.cutWAN()
	t.Log("WAN cut")
	r := sec(http.MethodPost, "/executed_obs_units/start", startBody(e.obsUnit))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var st answer
	r.json(t, &st)

	// The client's acknowledged-id log, and a reader polling the secondary during the whole run.
	var mu sync.Mutex
	acked := map[string]string{} // id → path
	txs := map[string]bool{}
	stopRead := make(chan struct{})
	readerDone := make(chan struct{})
	var readErrs []string
	polls := 0
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stopRead:
				return
			case <-time.After(50 * time.Millisecond):
			}
			mu.Lock()
			ids := make([]string, 0, len(acked))
			for id := range acked {
				ids = append(ids, id)
			}
			mu.Unlock()
			for _, id := range ids {
				req, _ := http.NewRequest(http.MethodGet, ts.secondary+"/raw_data_files/"+id, nil)
				req.Header.Set("Authorization", "Bearer "+e.token)
				resp, err := c.Do(req)
				if err == nil && resp.StatusCode == http.StatusOK {
					drain(resp.Body)
					resp.Body.Close()
					continue
				}
				msg := fmt.Sprint(err)
				if err == nil {
					msg = resp.Status
					resp.Body.Close()
				}
				mu.Lock()
				if len(readErrs) < 10 {
					readErrs = append(readErrs, id+": "+msg)
				}
				mu.Unlock()
			}
			mu.Lock()
			polls++
			mu.Unlock()
		}
	}()
	const files = 60
	for i := range files {
		r := sec(http.MethodPost, "/raw_data_files/", fileBody(st.ID, fmt.Sprintf("site2/%04d.dat", i)))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var a answer
		r.json(t, &a)
		require.Equal(t, "buffered", a.Status)
		mu.Lock()
		acked[a.ID], txs[a.TransactionID] = fmt.Sprintf("site2/%04d.dat", i), true
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	// Nothing crossed the WAN.
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'site2/%'`))
	time.Sleep(time.Second)

	// Hold the replica back, then let the WAN return: the main primary gets everything, the
	// secondary keeps serving the records from its cache as "committed".
	_, err := ts.replica.Exec(`SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	ts.restoreWAN(t)
	t.Logf("%s: WAN restored, replica replay paused", time.Since(begin).Round(time.Millisecond))
	ids := make([]string, 0, files)
	for id := range acked {
		ids = append(ids, id)
	}
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM raw_data_files WHERE id = ANY($1::uuid[])`, pq.StringArray(ids)) == files
	}, 45*time.Second, 100*time.Millisecond, "not every acknowledged file reached the main primary")
	require.Eventually(t, func() bool {
		for tx := range txs {
			if state, _ := secReceipt(t, c, ts.secondary, e.token, tx); state != "committed" {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "receipts did not become committed")
	for _, id := range ids[:5] {
		var f secFile
		r := sec(http.MethodGet, "/raw_data_files/"+id, nil)
		require.Equal(t, http.StatusOK, r.Status)
		r.json(t, &f)
		require.Equal(t, "committed", f.BufferStatus, "committed in the main primary, not yet in the replica")
	}
	var n int
	require.NoError(t, ts.replica.QueryRow(`SELECT count(*) FROM raw_data_files WHERE path LIKE 'site2/%'`).Scan(&n))
	require.Zero(t, n, "replay is paused: the replica must not have the rows yet")

	t.Logf("%s: all in the main primary, committed, cached at the secondary", time.Since(begin).Round(time.Millisecond))
	// The replica catches up: the cache lets go, reads come from the replica as "replicated".
	_, err = ts.replica.Exec(`SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for tx := range txs {
			if state, _ := secReceipt(t, c, ts.secondary, e.token, tx); state != "replicated" {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "receipts did not become replicated")
	for _, id := range ids {
		var f secFile
		r := sec(http.MethodGet, "/raw_data_files/"+id, nil)
		require.Equal(t, http.StatusOK, r.Status)
		r.json(t, &f)
		require.Equal(t, "replicated", f.BufferStatus)
		require.Equal(t, acked[id], f.Path)
	}
	t.Logf("%s: all replicated", time.Since(begin).Round(time.Millisecond))
	keys := ts.secRedisDB.Client().Keys(context.Background(), "ingest:rec:file:*").Val()
	require.Empty(t, keys, "replicated records must leave the secondary's cache")

	close(stopRead)
	<-readerDone
	mu.Lock()
	require.Empty(t, readErrs, "a read at the secondary missed an acknowledged record")
	require.Greater(t, polls, 10, "the reader must have polled throughout")
	mu.Unlock()

	// 0 lost, 0 duplicated at the main primary.
	rows, err := e.db.Query(`SELECT id::text, path FROM raw_data_files WHERE path LIKE 'site2/%'`)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[string]int{}
	for rows.Next() {
		var id, path string
		require.NoError(t, rows.Scan(&id, &path))
		require.Equal(t, acked[id], path, "a row the client was never told about, or under another id")
		seen[path]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, seen, files, "lost files")
	for p, k := range seen {
		require.Equal(t, 1, k, "duplicated %s", p)
	}
}

func secReceipt(t *testing.T, c *http.Client, base, token, tx string) (string, string) {
	r := doURL(t, c, http.MethodGet, base+"/api/ingest/transactions/"+tx, token, nil)
	if r.Status != http.StatusOK {
		return "", string(r.Body)
	}
	var rc struct {
		State     string `json:"state"`
		CommitLSN string `json:"commit_lsn"`
	}
	r.json(t, &rc)
	return rc.State, rc.CommitLSN
}

func TestParseLSN(t *testing.T) {
	for in, want := range map[string]uint64{"0/0": 0, "0/16B3748": 0x16B3748, "1/0": 1 << 32, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		got, ok := buffer.ParseLSN(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "16B3748", "x/1", "1/", "100000000/0"} {
		_, ok := buffer.ParseLSN(bad)
		require.False(t, ok, bad)
	}
}
