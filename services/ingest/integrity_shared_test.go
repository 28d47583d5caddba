package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestIntegrityShared is the integrity rules tried all at once by clients sharing one pool of
// obs units, executions, paths and files (TestIntegrityRandomized's clients each keep their
// own): clients start and finish executions (some finishing before they started), register files singly and in bulk on a small
// pool of paths (so registrations collide), create packages over random files (some already
// packaged, some of another execution), finalize them, and delete programs whose obs units
// executions use — while the worker is killed with SIGKILL and restarted. Every answer must be
// one the rules allow (no 500, no 502); at the end, once the worker has drained the queue, every
// acknowledged write is in the database, nothing is dead-lettered, and the invariant checker
// (`ingest admin check`) finds nothing. OPS_INTEGRITY_SECONDS sets the length of the run (default 15 s).
func TestIntegrityShared(t *testing.T) {
	seconds := 15
	if v, err := strconv.Atoi(os.Getenv("OPS_INTEGRITY_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d s", seed, seconds)

	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "ingest"}})
	e := envFor(t, s)
	api := testenv.Start(t, "ingest-api", testenv.Binary(t, "ingest"), s.Env, "-role", "api")
	testenv.WaitReady(t, api, s.URLs["ingest"]+"/readyz", 30*time.Second)
	worker, _ := ingestProc(t, s, "worker", nil)
	admin := s.JWT(t, "integrity-admin", "admin")

	r := &randomRun{e: e, admin: admin, c: &http.Client{Timeout: 10 * time.Second},
		starts: map[string]time.Time{}, finishes: map[string]time.Time{}, files: map[string]fileRec{},
		packages: map[string]bool{}, statuses: map[string]map[int]int{}}
	var source int64
	resp := r.call(http.MethodPost, "/sources/", admin, map[string]any{"name": "integrity-src", "kind": "fixed", "ra_deg": 10, "dec_deg": -20})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	source = int64(resp.json()["id"].(float64))
	for range 4 {
		r.newProgram(source)
	}

	ctx, stop := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for ctx.Err() == nil {
				r.step(rng, source)
			}
		}()
	}
	// The worker dies twice during the run, without warning.
	for i := range 2 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(seconds) * time.Second / 3):
			worker.Signal(syscall.SIGKILL)
			_, _ = worker.Wait(10 * time.Second)
			worker, _ = ingestProc(t, s, "worker", nil)
			t.Logf("worker killed and restarted (%d)", i+1)
		}
	}
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("answers by operation: %v", r.statuses)
	for op, byStatus := range r.statuses {
		for status, n := range byStatus {
			require.True(t, status < 500 || status == http.StatusServiceUnavailable, "%s answered %d (%d times)", op, status, n)
		}
	}
	require.Greater(t, len(r.files), 20, "the run acknowledged too few files to tell")

	// Drain: the killed workers' leases expire (worker.WatchOrphans), then every task is applied.
	rdb := s.Redis.Client()
	deadline := time.Now().Add(120 * time.Second)
	for {
		bg := context.Background()
		pending := rdb.LLen(bg, "asynq:{ingest}:pending").Val() + rdb.ZCard(bg, "asynq:{ingest}:retry").Val() +
			rdb.LLen(bg, "asynq:{ingest}:active").Val() + rdb.ZCard(bg, "asynq:{ingest}:scheduled").Val()
		if pending == 0 || time.Now().After(deadline) {
			require.Zero(t, pending, "the queue did not drain")
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.Zero(t, rdb.ZCard(context.Background(), "asynq:{ingest}:archived").Val(), "acknowledged writes were dead-lettered")

	missing := func(table string, ids []string) []string {
		rows, err := e.db.Query(`SELECT id::text FROM `+table+` WHERE id = ANY($1::uuid[])`, pq.StringArray(ids))
		require.NoError(t, err)
		defer rows.Close()
		have := map[string]bool{}
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			have[id] = true
		}
		var out []string
		for _, id := range ids {
			if !have[id] {
				out = append(out, id)
			}
		}
		return out
	}
	require.Empty(t, missing("executed_obs_units", keys(r.starts)), "acknowledged starts lost")
	require.Empty(t, missing("raw_data_files", keys(r.files)), "acknowledged files lost")
	require.Empty(t, missing("raw_data_packages", keys(r.packages)), "acknowledged packages lost")
	for id, end := range r.finishes {
		var got time.Time
		require.NoError(t, e.db.QueryRow(`SELECT end_time FROM executed_obs_units WHERE id = $1`, id).Scan(&got))
		require.True(t, got.Equal(end), "execution %s: acknowledged end %s, stored %s", id, end, got)
	}
	t.Logf("acknowledged: %d starts, %d finishes, %d files, %d packages", len(r.starts), len(r.finishes), len(r.files), len(r.packages))
	testenv.RequireInvariants(t, s.DatabaseURL)
	check := exec.Command(testenv.Binary(t, "ingest"), "admin", "check")
	check.Env = append(os.Environ(), "OPS_DATABASE_URL="+s.DatabaseURL)
	out, err := check.CombinedOutput()
	require.NoError(t, err, "ingest admin check:\n%s", out)
}

// fileRec is an acknowledged file.
type fileRec struct{ execution, path string }

// randomRun is the shared state of TestIntegrityShared's clients: what was acknowledged.
type randomRun struct {
	e     *env
	admin string
	c     *http.Client

	mu       sync.Mutex
	programs []int64 // live programs
	units    []int64 // obs units of live programs
	starts   map[string]time.Time
	finishes map[string]time.Time
	files    map[string]fileRec
	packages map[string]bool
	statuses map[string]map[int]int
	programN int
}

// reply is an answer read in full.
type reply struct {
	status int
	body   []byte
}

func (p reply) json() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(p.body, &m)
	return m
}

// call sends one request through the gateway; a transport error reads as status 0.
func (r *randomRun) call(method, path, bearer string, body any) reply {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.e.s.GatewayURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.c.Do(req)
	if err != nil {
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}
}

// note counts an answer of operation op.
func (r *randomRun) note(op string, status int) {
	if r.statuses[op] == nil {
		r.statuses[op] = map[int]int{}
	}
	r.statuses[op][status]++
}

// newProgram creates a program with two obs units on module 11.
func (r *randomRun) newProgram(source int64) {
	r.mu.Lock()
	r.programN++
	name := fmt.Sprintf("INT%d", r.programN)
	r.mu.Unlock()
	resp := r.call(http.MethodPost, "/observing_program/", r.admin, map[string]any{
		"short_name": name, "title": "integrity", "pi": "pi", "status": "active",
		"obs_units": []map[string]any{
			{"name": "a", "source_id": source, "instrument_module_id": 11, "duration_s": 600},
			{"name": "b", "source_id": source, "instrument_module_id": 11, "duration_s": 600},
		}})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("create-program", resp.status)
	if resp.status != http.StatusCreated {
		return
	}
	m := resp.json()
	r.programs = append(r.programs, int64(m["id"].(float64)))
	for _, u := range m["obs_units"].([]any) {
		r.units = append(r.units, int64(u.(map[string]any)["id"].(float64)))
	}
}

// pick returns a random element of xs (zero value when empty).
func pick[T any](rng *rand.Rand, xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	return xs[rng.IntN(len(xs))]
}

// step does one random operation and records what was acknowledged.
func (r *randomRun) step(rng *rand.Rand, source int64) {
	r.mu.Lock()
	unit := pick(rng, r.units)
	execs := keys(r.starts)
	files := keys(r.files)
	pkgs := keys(r.packages)
	r.mu.Unlock()
	base := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	token := r.e.token
	switch op := rng.IntN(100); {
	case op < 15 || len(execs) == 0: // start
		if unit == 0 {
			r.newProgram(source)
			return
		}
		id := uuid.NewString()
		at := base.Add(time.Duration(rng.IntN(3600)) * time.Second)
		resp := r.call(http.MethodPost, "/executed_obs_units/start", token, map[string]any{
			"id": id, "obs_unit_id": unit, "instrument_module_id": 11, "start_time": at.Format(time.RFC3339)})
		r.mu.Lock()
		r.note("start", resp.status)
		if resp.status == http.StatusCreated {
			r.starts[id] = at
		}
		r.mu.Unlock()
	case op < 25: // finish, one in five before its start
		id := pick(rng, execs)
		r.mu.Lock()
		at := r.starts[id]
		r.mu.Unlock()
		end := at.Add(time.Duration(rng.IntN(600)-120) * time.Second)
		resp := r.call(http.MethodPut, "/executed_obs_units/"+id+"/finish", token, map[string]any{"end_time": end.Format(time.RFC3339)})
		r.mu.Lock()
		r.note("finish", resp.status)
		if resp.status == http.StatusCreated {
			r.finishes[id] = end
		}
		r.mu.Unlock()
	case op < 55: // one file, on a small pool of paths
		id, exec := uuid.NewString(), pick(rng, execs)
		path := fmt.Sprintf("2026-11-25/scan%02d/f%03d.fits", rng.IntN(5), rng.IntN(40))
		resp := r.call(http.MethodPost, "/raw_data_files/", token, map[string]any{"id": id, "executed_obs_unit_id": exec,
			"instrument_module_id": 11, "path": path, "size_bytes": 100, "checksum": "xxh64:0123456789abcdef"})
		r.mu.Lock()
		r.note("register", resp.status)
		if resp.status == http.StatusCreated {
			r.files[id] = fileRec{exec, path}
		}
		r.mu.Unlock()
	case op < 65: // a bulk of 2–5 files
		exec := pick(rng, execs)
		var list []map[string]any
		recs := map[string]fileRec{}
		for range 2 + rng.IntN(4) {
			id := uuid.NewString()
			path := fmt.Sprintf("2026-11-25/bulk%02d/f%03d.fits", rng.IntN(3), rng.IntN(60))
			list = append(list, map[string]any{"id": id, "executed_obs_unit_id": exec, "instrument_module_id": 11,
				"path": path, "size_bytes": 100, "checksum": "xxh64:0123456789abcdef"})
			recs[id] = fileRec{exec, path}
		}
		resp := r.call(http.MethodPost, "/raw_data_files/bulk", token, map[string]any{"files": list})
		r.mu.Lock()
		r.note("bulk", resp.status)
		if resp.status == http.StatusCreated {
			for id, f := range recs {
				r.files[id] = f
			}
		}
		r.mu.Unlock()
	case op < 80: // a package over 1–4 random files, mostly of one execution
		if len(files) == 0 {
			return
		}
		r.mu.Lock()
		exec := r.files[pick(rng, files)].execution
		var ids []string
		for range 1 + rng.IntN(4) {
			f := pick(rng, files)
			if r.files[f].execution == exec || rng.IntN(10) == 0 {
				ids = append(ids, f)
			}
		}
		r.mu.Unlock()
		id := uuid.NewString()
		resp := r.call(http.MethodPost, "/raw_data_package/", token, map[string]any{"id": id, "executed_obs_unit_id": exec,
			"instrument_module_id": 11, "name": fmt.Sprintf("pkg-%d", rng.IntN(8)), "file_ids": ids})
		r.mu.Lock()
		r.note("package", resp.status)
		if resp.status == http.StatusCreated {
			r.packages[id] = true
		}
		r.mu.Unlock()
	case op < 88: // finalize
		if len(pkgs) == 0 {
			return
		}
		resp := r.call(http.MethodPut, "/raw_data_package/"+pick(rng, pkgs)+"/finalize", token, map[string]any{
			"size_bytes": 1000, "checksum": "xxh64:0123456789abcdef"})
		r.mu.Lock()
		r.note("finalize", resp.status)
		r.mu.Unlock()
	case op < 92: // delete a program (refused while executions use its obs units)
		r.mu.Lock()
		prog := pick(rng, r.programs)
		r.mu.Unlock()
		if prog == 0 {
			return
		}
		resp := r.call(http.MethodDelete, "/observing_program/"+strconv.FormatInt(prog, 10), r.admin, nil)
		r.mu.Lock()
		r.note("delete-program", resp.status)
		r.mu.Unlock()
		if resp.status == http.StatusNoContent {
			r.forgetProgram(prog)
			r.newProgram(source)
		}
	default: // read an execution list (reads must never fail)
		resp := r.call(http.MethodGet, "/executed_obs_units/"+strconv.FormatInt(unit, 10), token, nil)
		r.mu.Lock()
		r.note("read", resp.status)
		r.mu.Unlock()
	}
}

// forgetProgram drops a deleted program's obs units from the pool (their ids are reloaded).
func (r *randomRun) forgetProgram(id int64) {
	rows, err := r.e.db.Query(`SELECT id FROM obs_units WHERE program_id IN (SELECT id FROM observing_programs)`)
	if err != nil {
		return
	}
	defer rows.Close()
	var units []int64
	for rows.Next() {
		var u int64
		if rows.Scan(&u) == nil {
			units = append(units, u)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units = units
	for i, p := range r.programs {
		if p == id {
			r.programs = append(r.programs[:i], r.programs[i+1:]...)
			break
		}
	}
}
