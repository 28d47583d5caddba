package ingest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// loadLog is the client side of a fault test: every write it sent, every id acknowledged (201),
// and what the other answers were.
type loadLog struct {
	mu       sync.Mutex
	acked    map[string]string // id → path
	statuses map[int]int
	// badAcks are 201s for requests that began and ended while the fault held (never allowed).
	badAcks int
	// during are the latencies of answers to requests sent while the fault held.
	during []time.Duration
	wg     sync.WaitGroup // the clients: verdict waits for them to end
}

// fault is an interval during which no write may be acknowledged (zero: none).
type fault struct {
	mu       sync.Mutex
	from, to time.Time
}

func (f *fault) set(from, to time.Time) { f.mu.Lock(); f.from, f.to = from, to; f.mu.Unlock() }
func (f *fault) within(a, b time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.from.IsZero() && a.After(f.from) && (f.to.IsZero() || b.Before(f.to))
}

// runLoad registers files through the gateway from n clients, each at most perSecond requests a
// second, until ctx ends. Each file is retried with its Idempotency-Key until acknowledged, as an
// instrument script would; a file never acknowledged when the load stops is simply not logged.
func runLoad(ctx context.Context, t *testing.T, e *env, eou string, n, perSecond int, f *fault) *loadLog {
	lg := &loadLog{acked: map[string]string{}, statuses: map[int]int{}}
	var seq atomic.Int64
	wg := &lg.wg
	client := &http.Client{Timeout: 10 * time.Second}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(perSecond))
			defer tick.Stop()
			for ctx.Err() == nil {
				path := fmt.Sprintf("load/%07d.dat", seq.Add(1))
				for ctx.Err() == nil {
					<-tick.C
					start := time.Now()
					status, id := postFile(client, e, eou, path)
					end := time.Now()
					lg.mu.Lock()
					lg.statuses[status]++
					if f.within(start, end) {
						lg.during = append(lg.during, end.Sub(start))
						if status == http.StatusCreated {
							lg.badAcks++
						}
					}
					if status == http.StatusCreated {
						lg.acked[id] = path
					}
					lg.mu.Unlock()
					if status == http.StatusCreated || status == http.StatusConflict {
						// 409: the path is registered already — an earlier attempt was held though its
						// answer was lost (a phantom: allowed); a path is unique per module.
						break
					}
				}
			}
		}()
	}
	return lg
}

func postFile(c *http.Client, e *env, eou, path string) (int, string) {
	body := fmt.Sprintf(`{"executed_obs_unit_id":%q,"instrument_module_id":11,"path":%q,"size_bytes":1,"checksum":"xxh64:0123456789abcdef"}`, eou, path)
	req, _ := http.NewRequest(http.MethodPost, e.s.GatewayURL+"/raw_data_files/", stringsReader(body))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-"+path)
	resp, err := c.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var a answer
	if resp.StatusCode == http.StatusCreated {
		if err := jsonDecode(resp.Body, &a); err != nil {
			return 0, ""
		}
	} else {
		drain(resp.Body)
	}
	return resp.StatusCode, a.ID
}

// verdict compares the acknowledged ids with the database once the queue is drained: lost
// (acknowledged, absent), duplicated (one path registered twice), phantom (present, never
// acknowledged: allowed, reported).
func verdict(t *testing.T, e *env, lg *loadLog, drainWithin time.Duration) {
	t.Helper()
	lg.wg.Wait() // the load was stopped: let answers in flight be logged
	lg.mu.Lock()
	acked := make(map[string]string, len(lg.acked))
	for k, v := range lg.acked {
		acked[k] = v
	}
	statuses := fmt.Sprint(lg.statuses)
	lg.mu.Unlock()
	ids := make([]string, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	rdb := e.s.Redis.Client()
	deadline := time.Now().Add(drainWithin)
	for {
		pending := rdb.LLen(context.Background(), "asynq:{ingest}:pending").Val() + rdb.ZCard(context.Background(), "asynq:{ingest}:retry").Val() +
			rdb.LLen(context.Background(), "asynq:{ingest}:active").Val()
		var present int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM raw_data_files WHERE id = ANY($1::uuid[])`, pq.StringArray(ids)).Scan(&present))
		if (present == len(ids) && pending == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rows, err := e.db.Query(`SELECT id::text, path FROM raw_data_files WHERE path LIKE 'load/%'`)
	require.NoError(t, err)
	defer rows.Close()
	inDB := map[string]bool{}
	perPath := map[string]int{}
	for rows.Next() {
		var id, path string
		require.NoError(t, rows.Scan(&id, &path))
		inDB[id] = true
		perPath[path]++
	}
	var lost, phantom, dup []string
	for id := range acked {
		if !inDB[id] {
			lost = append(lost, id)
		}
	}
	for id := range inDB {
		if _, ok := acked[id]; !ok {
			phantom = append(phantom, id)
		}
	}
	for p, n := range perPath {
		if n > 1 {
			dup = append(dup, p)
		}
	}
	sort.Strings(lost)
	t.Logf("acknowledged %d, in database %d: lost %d, duplicated %d, phantom %d (allowed); answers %s",
		len(acked), len(inDB), len(lost), len(dup), len(phantom), statuses)
	require.Empty(t, lost, "acknowledged writes lost")
	require.Empty(t, dup, "writes applied twice")
	require.Greater(t, len(acked), 50, "the load made too few writes to tell")
	testenv.RequireInvariants(t, e.s.DatabaseURL)
}

// TestFaultWorkerKilled kills the worker with SIGKILL ten times under steady load, restarting it
// each time: nothing acknowledged is lost or applied twice.
func TestFaultWorkerKilled(t *testing.T) {
	e := newSplitEnv(t)
	eou := e.start(t, startBody(e.obsUnit)).ID
	ctx, stop := context.WithCancel(context.Background())
	lg := runLoad(ctx, t, e, eou, 4, 25, &fault{})
	w, _ := ingestProc(t, e.s, "worker", nil)
	for i := range 10 {
		time.Sleep(700 * time.Millisecond)
		w.Signal(syscall.SIGKILL)
		_, _ = w.Wait(10 * time.Second)
		w, _ = ingestProc(t, e.s, "worker", nil)
		t.Logf("worker killed and restarted (%d)", i+1)
	}
	time.Sleep(time.Second)
	stop()
	lg.wg.Wait()
	// The killed workers' tasks go back to the queue once their leases are 10 s past their end
	// (30 s leases; worker.WatchOrphans), then the new worker applies them.
	verdict(t, e, lg, 90*time.Second)
	var archived int64 = e.s.Redis.Client().ZCard(context.Background(), "asynq:{ingest}:archived").Val()
	require.Zero(t, archived)
}

// TestFaultRedisKilled kills Redis (SIGKILL) under load and restarts it from its AOF: while it is
// down the API answers 503 at once (p99 < 0.3 s) and never 201; nothing acknowledged is lost or
// applied twice.
func TestFaultRedisKilled(t *testing.T) {
	e := newEnv(t, map[string]string{"OPS_INGEST_REDIS_TIMEOUT": "500ms"})
	eou := e.start(t, startBody(e.obsUnit)).ID
	ctx, stop := context.WithCancel(context.Background())
	f := &fault{}
	lg := runLoad(ctx, t, e, eou, 4, 25, f)
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		e.s.Redis.Kill()
		down := time.Now()
		f.set(down, time.Time{})
		time.Sleep(2 * time.Second)
		f.set(down, time.Now())
		e.s.Redis.Start()
	}
	time.Sleep(2 * time.Second)
	stop()
	lg.wg.Wait()
	lg.mu.Lock()
	during := slices.Clone(lg.during)
	bad := lg.badAcks
	lg.mu.Unlock()
	require.Zero(t, bad, "201 answered while Redis was down")
	require.NotEmpty(t, during, "no request was answered while Redis was down")
	slices.Sort(during)
	p99 := during[len(during)*99/100]
	t.Logf("answers while Redis was down: %d, p99 %v", len(during), p99)
	// Redis refuses connections: each of a request's Redis calls fails in about 10 ms
	// (service.RedisFailFast), so the 503 comes at once; 1.5 s before the chassis failed fast.
	require.Less(t, p99, 300*time.Millisecond, "503 must come at once while Redis is down")
	verdict(t, e, lg, 60*time.Second)
}

// TestReplaysAndReordering sends every buffered request of several observations three times, in
// shuffled order, with client-chosen ids (a request whose prerequisite is not held yet, e.g. a
// finish before its start, is sent again later, as a client would): exactly one set of rows
// results, and no replay is refused as a conflict.
func TestReplaysAndReordering(t *testing.T) {
	e := newEnv(t, nil)
	type req struct {
		method, path string
		body         map[string]any
	}
	var reqs []req
	const observations = 5
	for o := range observations {
		eou := ingest.NewID()
		start := startBody(e.obsUnit)
		start["id"] = eou
		reqs = append(reqs, req{"POST", "/executed_obs_units/start", start},
			req{"PUT", "/executed_obs_units/" + eou + "/finish", map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "completed"}})
		var ids []string
		for i := range 3 {
			f := fileBody(eou, fmt.Sprintf("obs%d/single%d", o, i))
			f["id"] = ingest.NewID()
			ids = append(ids, f["id"].(string))
			reqs = append(reqs, req{"POST", "/raw_data_files/", f})
		}
		var bulk []any
		for i := range 4 {
			f := fileBody(eou, fmt.Sprintf("obs%d/bulk%d", o, i))
			f["id"] = ingest.NewID()
			bulk = append(bulk, f)
		}
		reqs = append(reqs, req{"POST", "/raw_data_files/bulk", map[string]any{"files": bulk}},
			req{"POST", "/raw_data_package/", map[string]any{"id": ingest.NewID(), "executed_obs_unit_id": eou, "instrument_module_id": 11, "name": fmt.Sprintf("pkg%d", o), "file_ids": ids[:2]}})
	}
	var queue []req
	for range 3 {
		queue = append(queue, reqs...)
	}
	rand.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
	statuses := map[int]int{}
	for sent := 0; len(queue) > 0; sent++ {
		require.Less(t, sent, 20*len(reqs), "requests keep being refused")
		q := queue[0]
		queue = queue[1:]
		r := e.do(t, q.method, q.path, e.token, q.body)
		statuses[r.Status]++
		switch r.Status {
		case http.StatusCreated:
		case http.StatusNotFound, http.StatusUnprocessableEntity: // its start (or files) not held yet
			queue = append(queue, q)
		default:
			t.Fatalf("%s %s: %d %s", q.method, q.path, r.Status, r.Body)
		}
	}
	t.Logf("answers: %v", statuses)
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM raw_data_files`) == observations*7 &&
			e.count(t, `SELECT count(*) FROM executed_obs_units WHERE status = 'completed' AND start_time IS NOT NULL`) == observations &&
			e.count(t, `SELECT count(*) FROM raw_data_packages`) == observations
	}, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, observations, e.count(t, `SELECT count(*) FROM executed_obs_units`))
	require.Equal(t, observations*7, e.count(t, `SELECT count(DISTINCT path) FROM raw_data_files`))
	testenv.RequireInvariants(t, e.s.DatabaseURL)
}
