package ingest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// ledger is the clients' record of what the API acknowledged, to compare with the database at the
// end, and of every answer they got.
type ledger struct {
	mu        sync.Mutex
	starts    map[string]bool   // execution id
	finishes  map[string]string // execution id → end_time acknowledged
	files     map[string]string // file id → path
	pkgs      map[string]bool   // package id
	finalized map[string]bool   // package id
	answers   map[string]int    // "op status" → count
	bad       []string          // answers never allowed
}

func (l *ledger) answer(op string, status int, allowed ...int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[fmt.Sprintf("%s %d", op, status)]++
	for _, a := range allowed {
		if a == status {
			return true
		}
	}
	l.bad = append(l.bad, fmt.Sprintf("%s answered %d", op, status))
	return false
}

// integrityClient is one instrument-like client: its own executions, files and packages, and
// the operations it may try next.
type integrityClient struct {
	t        *testing.T
	id       int
	e        *env
	l        *ledger
	rng      *rand.Rand
	n        int
	execs    []string             // acknowledged starts
	begun    map[string]time.Time // their start times
	finished map[string]bool
	files    map[string][]string // execution → acknowledged file ids
	paths    map[string]string   // file id → path
	packaged map[string]bool     // file ids this client put in a package
	pkgs     []string            // acknowledged packages
}

// send makes one request with its own Idempotency-Key; a transport error is status 0 (never
// allowed: nothing in this test makes the gateway unreachable).
func (c *integrityClient) send(method, path string, body any) response {
	c.n++
	req := testenv.Request(c.t, method, c.e.s.GatewayURL+path, c.e.token, body)
	req.Header.Set("Idempotency-Key", fmt.Sprintf("c%d-%d", c.id, c.n))
	resp, err := c.e.c.Do(req)
	if err != nil {
		return response{}
	}
	defer resp.Body.Close()
	drain(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header}
}

// step does one random operation, valid or conflicting, and records what was acknowledged.
func (c *integrityClient) step() {
	id := c.id
	const created, conflict, invalid, notFound = http.StatusCreated, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusNotFound
	switch k := c.rng.IntN(100); {
	case k < 10 || len(c.execs) == 0: // start an execution
		eid := ingest.NewID()
		at := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).Add(time.Duration(c.rng.IntN(100000)) * time.Second)
		b := startBody(c.e.obsUnit)
		b["id"], b["start_time"] = eid, at.Format(time.RFC3339)
		if r := c.send(http.MethodPost, "/executed_obs_units/start", b); c.l.answer("start", r.Status, created) {
			c.execs = append(c.execs, eid)
			c.begun[eid] = at
			c.l.mu.Lock()
			c.l.starts[eid] = true
			c.l.mu.Unlock()
		}
	case k < 18: // finish one, or try to finish it before it started (refused)
		eid := c.execs[c.rng.IntN(len(c.execs))]
		if c.finished[eid] {
			return
		}
		if c.rng.IntN(4) == 0 {
			end := c.begun[eid].Add(-time.Hour).Format(time.RFC3339)
			r := c.send(http.MethodPut, "/executed_obs_units/"+eid+"/finish", map[string]any{"end_time": end, "status": "completed"})
			c.l.answer("finish-before-start", r.Status, invalid)
			return
		}
		end := c.begun[eid].Add(10 * time.Minute).Format(time.RFC3339)
		r := c.send(http.MethodPut, "/executed_obs_units/"+eid+"/finish", map[string]any{"end_time": end, "status": "completed"})
		if c.l.answer("finish", r.Status, created) {
			c.finished[eid] = true
			c.l.mu.Lock()
			c.l.finishes[eid] = end
			c.l.mu.Unlock()
		}
	case k < 50: // register a file; sometimes replay one, or reuse a path under a new id
		eid := c.execs[c.rng.IntN(len(c.execs))]
		b := fileBody(eid, fmt.Sprintf("integrity/c%d/%s/f%d", id, eid[len(eid)-6:], c.n))
		b["id"] = ingest.NewID()
		op := "file"
		if prior := c.files[eid]; len(prior) > 0 && c.rng.IntN(5) == 0 {
			if c.rng.IntN(2) == 0 {
				op = "file-replay" // the same file again: an idempotent replay
				b["id"] = prior[c.rng.IntN(len(prior))]
			} else {
				op = "file-same-path" // another id for a registered path
			}
			b["path"] = c.paths[prior[c.rng.IntN(len(prior))]]
			if op == "file-replay" {
				b["path"] = c.paths[b["id"].(string)]
			}
		}
		r := c.send(http.MethodPost, "/raw_data_files/", b)
		want := created // a new path, or a replay
		if op == "file-same-path" {
			want = conflict // rule 2: the path is the other file's
		}
		if c.l.answer(op, r.Status, want) && r.Status == created {
			fid := b["id"].(string)
			if op != "file-replay" {
				c.files[eid] = append(c.files[eid], fid)
			}
			c.paths[fid] = b["path"].(string)
			c.l.mu.Lock()
			c.l.files[fid] = b["path"].(string)
			c.l.mu.Unlock()
		}
	case k < 65: // a bulk of new files
		eid := c.execs[c.rng.IntN(len(c.execs))]
		var files []any
		var ids []string
		for i := range 2 + c.rng.IntN(6) {
			b := fileBody(eid, fmt.Sprintf("integrity/c%d/%s/b%d-%d", id, eid[len(eid)-6:], c.n, i))
			b["id"] = ingest.NewID()
			ids = append(ids, b["id"].(string))
			files = append(files, b)
		}
		if r := c.send(http.MethodPost, "/raw_data_files/bulk", map[string]any{"files": files}); c.l.answer("bulk", r.Status, created) {
			c.files[eid] = append(c.files[eid], ids...)
			c.l.mu.Lock()
			for i, fid := range ids {
				c.paths[fid] = files[i].(map[string]any)["path"].(string)
				c.l.files[fid] = c.paths[fid]
			}
			c.l.mu.Unlock()
		}
	case k < 85: // a package of files not packaged yet, or one also claiming a packaged file
		eid := c.execs[c.rng.IntN(len(c.execs))]
		var free, taken []string
		for _, f := range c.files[eid] {
			if c.packaged[f] {
				taken = append(taken, f)
			} else {
				free = append(free, f)
			}
		}
		if len(free) == 0 {
			return
		}
		pick := free[:1+c.rng.IntN(min(3, len(free)))]
		op := "package"
		if len(taken) > 0 && c.rng.IntN(5) == 0 {
			op = "package-claiming-packaged-file"
			pick = append(append([]string{}, pick...), taken[c.rng.IntN(len(taken))])
		}
		pid := ingest.NewID()
		r := c.send(http.MethodPost, "/raw_data_package/", map[string]any{"id": pid, "executed_obs_unit_id": eid,
			"instrument_module_id": 11, "name": "p-" + pid, "file_ids": pick})
		want := created
		if op == "package-claiming-packaged-file" {
			want = conflict // rule 1: the file is in another package
		}
		if c.l.answer(op, r.Status, want) && r.Status == created {
			for _, f := range pick {
				c.packaged[f] = true
			}
			c.pkgs = append(c.pkgs, pid)
			c.l.mu.Lock()
			c.l.pkgs[pid] = true
			c.l.mu.Unlock()
		}
	default: // finalize a package (a direct write: it may not be applied yet, or already final)
		if len(c.pkgs) == 0 {
			return
		}
		pid := c.pkgs[c.rng.IntN(len(c.pkgs))]
		r := c.send(http.MethodPut, "/raw_data_package/"+pid+"/finalize", map[string]any{"size_bytes": 4096, "checksum": "xxh64:0123456789abcdef"})
		if c.l.answer("finalize", r.Status, http.StatusOK, notFound, conflict, invalid) && r.Status == http.StatusOK {
			c.l.mu.Lock()
			c.l.finalized[pid] = true
			c.l.mu.Unlock()
		}
	}
}

// TestIntegrityRandomized: clients make random valid and conflicting requests (starts, finishes
// and finishes before the start, files, replays, paths reused under another id, bulks, packages,
// packages claiming a packaged file, finalizes) through the gateway while the worker is killed
// (-9) and restarted once. Once the buffer drains, everything acknowledged is in the database as
// acknowledged (0 lost), nothing is dead-lettered, no answer was one never allowed, and every
// invariant of migrations/invariants holds. OPS_INTEGRITY_SECONDS sets the load's length (20 s).
func TestIntegrityRandomized(t *testing.T) {
	length := 20 * time.Second
	if v := os.Getenv("OPS_INTEGRITY_SECONDS"); v != "" {
		var s int
		_, err := fmt.Sscan(v, &s)
		require.NoError(t, err, "OPS_INTEGRITY_SECONDS")
		length = time.Duration(s) * time.Second
	}
	e := newSplitEnv(t)
	w, _ := ingestProc(t, e.s, "worker", nil)
	l := &ledger{starts: map[string]bool{}, finishes: map[string]string{}, files: map[string]string{}, pkgs: map[string]bool{},
		finalized: map[string]bool{}, answers: map[string]int{}}
	ctx, stop := context.WithTimeout(context.Background(), length)
	defer stop()
	var wg sync.WaitGroup
	for id := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &integrityClient{t: t, id: id, e: e, l: l, rng: rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano()))),
				begun: map[string]time.Time{}, finished: map[string]bool{}, files: map[string][]string{}, paths: map[string]string{},
				packaged: map[string]bool{}}
			for ctx.Err() == nil {
				c.step()
			}
		}()
	}
	// Early, so that asynq's recovery of the killed worker's leases (30 s leases) ends within the
	// load and the drain.
	time.Sleep(min(2*time.Second, length/4))
	w.Signal(syscall.SIGKILL)
	_, _ = w.Wait(10 * time.Second)
	_, _ = ingestProc(t, e.s, "worker", nil)
	t.Log("worker killed (-9) and restarted")
	wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	keys := func(m map[string]bool) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	fileIDs := make([]string, 0, len(l.files))
	for id := range l.files {
		fileIDs = append(fileIDs, id)
	}
	rdb := e.s.Redis.Client()
	queued := func() int64 {
		bg := context.Background()
		return rdb.LLen(bg, "asynq:{ingest}:pending").Val() + rdb.ZCard(bg, "asynq:{ingest}:retry").Val() +
			rdb.LLen(bg, "asynq:{ingest}:active").Val() + rdb.ZCard(bg, "asynq:{ingest}:scheduled").Val()
	}
	present := func(table string, ids []string) int {
		return e.count(t, `SELECT count(*) FROM `+table+` WHERE id = ANY($1::uuid[])`, pq.StringArray(ids))
	}
	deadline := time.Now().Add(90 * time.Second)
	for queued() > 0 || present("raw_data_files", fileIDs) < len(fileIDs) {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	var lost []string
	for _, c := range []struct {
		table string
		ids   []string
	}{{"executed_obs_units", keys(l.starts)}, {"raw_data_files", fileIDs}, {"raw_data_packages", keys(l.pkgs)}} {
		rows, err := e.db.Query(`SELECT x::text FROM unnest($1::uuid[]) x WHERE NOT EXISTS (SELECT 1 FROM `+c.table+` WHERE id = x)`, pq.StringArray(c.ids))
		require.NoError(t, err)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			lost = append(lost, c.table+" "+id)
		}
		require.NoError(t, rows.Close())
	}
	var wrong []string
	for eid, end := range l.finishes {
		var ok bool
		require.NoError(t, e.db.QueryRow(`SELECT coalesce(status = 'completed' AND end_time = $2::timestamptz AND start_time IS NOT NULL, false)
			FROM executed_obs_units WHERE id = $1`, eid, end).Scan(&ok))
		if !ok {
			wrong = append(wrong, "finish of "+eid)
		}
	}
	for fid, path := range l.files {
		var got string
		if err := e.db.QueryRow(`SELECT path FROM raw_data_files WHERE id = $1`, fid).Scan(&got); err == nil && got != path {
			wrong = append(wrong, fmt.Sprintf("file %s has path %s, acknowledged %s", fid, got, path))
		}
	}
	if n := e.count(t, `SELECT count(*) FROM raw_data_packages WHERE id = ANY($1::uuid[]) AND status <> 'complete'`, pq.StringArray(keys(l.finalized))); n > 0 {
		wrong = append(wrong, fmt.Sprintf("%d finalized package(s) not complete", n))
	}
	answers := make([]string, 0, len(l.answers))
	for k, n := range l.answers {
		answers = append(answers, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(answers)
	t.Logf("acknowledged: %d starts, %d finishes, %d files, %d packages, %d finalized; answers: %v",
		len(l.starts), len(l.finishes), len(l.files), len(l.pkgs), len(l.finalized), answers)
	sort.Strings(lost)
	require.Empty(t, lost, "acknowledged writes lost")
	require.Empty(t, wrong, "acknowledged writes stored otherwise")
	require.Empty(t, l.bad, "answers never allowed")
	require.Zero(t, rdb.ZCard(context.Background(), "asynq:{ingest}:archived").Val(), "acknowledged writes dead-lettered")
	require.Greater(t, len(l.files), 100, "the load made too few writes to tell")
	testenv.RequireInvariants(t, e.s.DatabaseURL)
}
