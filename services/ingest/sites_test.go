package ingest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest/buffer"
)

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
	begin := time.Now()
	ts := startTwoSites(t, twoSitesOptions{})
	t.Logf("two sites up in %s", time.Since(begin).Round(time.Millisecond))
	e := ts.main
	c := &http.Client{Timeout: 10 * time.Second}
	sec := func(method, path string, body any) response {
		return doURL(t, c, method, ts.secondary+path, e.token, body)
	}

	ts.CutWAN()
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
	// The observation ends and its first 10 files become a package, still with the WAN cut.
	r = sec(http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "completed"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var fin answer
	r.json(t, &fin)
	mu.Lock()
	var pkgFiles []string
	for id := range acked {
		if len(pkgFiles) < 10 {
			pkgFiles = append(pkgFiles, id)
		}
	}
	mu.Unlock()
	r = sec(http.MethodPost, "/raw_data_package/", map[string]any{"executed_obs_unit_id": st.ID, "instrument_module_id": 11, "name": "site2", "file_ids": pkgFiles})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var pkg answer
	r.json(t, &pkg)
	mu.Lock()
	txs[st.TransactionID], txs[fin.TransactionID], txs[pkg.TransactionID] = true, true, true
	mu.Unlock()
	// Every record reads buffered: the execution (start and finish), the package and its files.
	requireSecStatus(t, c, ts.secondary, e.token, e.obsUnit, st.ID, pkg.ID, len(pkgFiles), "buffered")

	// Nothing crossed the WAN.
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'site2/%'`))
	time.Sleep(time.Second)

	// Hold the replica back, then let the WAN return: the main primary gets everything, the
	// secondary keeps serving the records from its cache as "committed".
	ts.PauseReplay(t)
	ts.RestoreWAN(t)
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
	requireSecStatus(t, c, ts.secondary, e.token, e.obsUnit, st.ID, pkg.ID, len(pkgFiles), "committed")
	var n int
	require.NoError(t, ts.Replica.QueryRow(`SELECT count(*) FROM raw_data_files WHERE path LIKE 'site2/%'`).Scan(&n))
	require.Zero(t, n, "replay is paused: the replica must not have the rows yet")

	t.Logf("%s: all in the main primary, committed, cached at the secondary", time.Since(begin).Round(time.Millisecond))
	// The main learnt the replayed paths (its committed filter, through ingest_replayed_files): a
	// registration of one of them at the main under another id is refused, not acknowledged.
	require.Eventually(t, func() bool { return e.count(t, `SELECT count(*) FROM ingest_replayed_files`) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the main's API takes the secondary's replayed files")
	var replayedID string
	for id, path := range acked {
		if path == "site2/0000.dat" {
			replayedID = id
		}
	}
	r = e.post(t, "/raw_data_files/", fileBody(st.ID, "site2/0000.dat"))
	require.Equal(t, http.StatusConflict, r.Status, "a replayed path at the main: %s", r.Body)
	require.Contains(t, r.detail(t), replayedID)
	// The replica catches up: the cache lets go, reads come from the replica as "replicated".
	ts.ResumeReplay(t)
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
	requireSecStatus(t, c, ts.secondary, e.token, e.obsUnit, st.ID, pkg.ID, len(pkgFiles), "replicated")
	t.Logf("%s: all replicated", time.Since(begin).Round(time.Millisecond))
	// The backlog was applied several tasks to a transaction (the worker's batches).
	tasks, commits := workerBatches(t, c, ts.URLs[secWorker])
	t.Logf("the secondary's worker applied %d tasks in %d transactions", tasks, commits)
	require.Less(t, commits, tasks, "a backlog must be applied in shared transactions")
	require.Zero(t, ts.Redis.Client().HLen(context.Background(), "ingest:rec:file").Val(), "replicated records must leave the secondary's cache")

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
	testenv.RequireInvariants(t, e.s.DatabaseURL)
	requireReplayRoleOnly(t, ts)
}

// requireReplayRoleOnly: the secondary's ingest replayed as obsops_replay (its sessions are at the
// main primary), and that role, through the WAN as the secondary holds it, may not touch a catalog,
// authtoken or site table (decisions §45): permission denied, the main unchanged.
func requireReplayRoleOnly(t *testing.T, ts *twoSites) {
	t.Helper()
	e := ts.main
	var sessions int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE usename = 'obsops_replay'`).Scan(&sessions))
	require.Positive(t, sessions, "the secondary's ingest must reach the main as obsops_replay")
	u, err := url.Parse(ts.MainViaWAN)
	require.NoError(t, err)
	u.User = url.User("obsops_replay")
	replay, err := sql.Open("postgres", u.String())
	require.NoError(t, err)
	defer replay.Close()
	var before int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources`).Scan(&before))
	for what, stmt := range map[string]string{
		"insert a source":      `INSERT INTO sources (name) VALUES ('replay-was-here')`,
		"update obs units":     `UPDATE obs_units SET name = name`,
		"read API tokens":      `SELECT count(*) FROM api_tokens`,
		"delete users":         `DELETE FROM users`,
		"write the PWV series": `DELETE FROM site_weather`,
	} {
		_, err := replay.Exec(stmt)
		var pqErr *pq.Error
		require.True(t, errors.As(err, &pqErr) && pqErr.Code == "42501", "obsops_replay may %s at the main: %v", what, err)
	}
	var after int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources`).Scan(&after))
	require.Equal(t, before, after)
}

// requireSecStatus reads at the secondary execution eou (in the list of obs unit ou), package pkg
// with its files, and requires every one of them to report buffer_status want (and the
// execution to be completed, the package to list files files).
func requireSecStatus(t *testing.T, c *http.Client, base, token string, ou int64, eou, pkg string, files int, want string) {
	t.Helper()
	r := doURL(t, c, http.MethodGet, fmt.Sprintf("%s/executed_obs_units/%d?limit=500", base, ou), token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list struct {
		Items []struct {
			ID           string `json:"id"`
			Status       string `json:"status"`
			BufferStatus string `json:"buffer_status"`
		} `json:"items"`
	}
	r.json(t, &list)
	found := false
	for _, it := range list.Items {
		if it.ID == eou {
			found = true
			require.Equal(t, "completed", it.Status, "the finish is read with the execution")
			require.Equal(t, want, it.BufferStatus, "execution")
		}
	}
	require.True(t, found, "execution %s missing at the secondary: %s", eou, r.Body)
	r = doURL(t, c, http.MethodGet, base+"/raw_data_package/"+pkg+"?limit=500", token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var view struct {
		BufferStatus string `json:"buffer_status"`
		Files        struct {
			Items []secFile `json:"items"`
		} `json:"files"`
	}
	r.json(t, &view)
	require.Equal(t, want, view.BufferStatus, "package")
	require.Len(t, view.Files.Items, files, "the package's files: %s", r.Body)
	for _, f := range view.Files.Items {
		require.Equal(t, want, f.BufferStatus, "file %s of the package", f.ID)
	}
}

// workerBatches reads from a worker's /metrics how many tasks it applied in how many
// transactions (obsops_ingest_batch_tasks: sum and count).
func workerBatches(t *testing.T, c *http.Client, base string) (tasks, txs int) {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		var v float64
		switch {
		case strings.HasPrefix(line, "obsops_ingest_batch_tasks_sum "):
			_, _ = fmt.Sscan(strings.TrimPrefix(line, "obsops_ingest_batch_tasks_sum "), &v)
			tasks = int(v)
		case strings.HasPrefix(line, "obsops_ingest_batch_tasks_count "):
			_, _ = fmt.Sscan(strings.TrimPrefix(line, "obsops_ingest_batch_tasks_count "), &v)
			txs = int(v)
		}
	}
	require.Positive(t, txs, "no obsops_ingest_batch_tasks in the worker's metrics")
	return tasks, txs
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
