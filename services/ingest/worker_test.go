package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// ingestProc starts one more ingest process of the suite with role and extra settings, on its
// own address; it returns the process and its base URL.
func ingestProc(t *testing.T, s *testenv.Suite, role string, extra map[string]string) (*testenv.Process, string) {
	t.Helper()
	vars := maps.Clone(s.Env)
	addr := testenv.FreeAddr(t)
	vars["OPS_INGEST_ADDR"] = addr
	maps.Copy(vars, extra)
	p := testenv.Start(t, "ingest-"+role, testenv.Binary(t, "ingest"), vars, "-role", role)
	testenv.WaitReady(t, p, "http://"+addr+"/readyz", 30*time.Second)
	return p, "http://" + addr
}

// newSplitEnv is newEnv with the suite's ingest as API only (on the gateway's upstream
// address): workers are started by the test.
func newSplitEnv(t *testing.T) *env {
	t.Helper()
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "catalog", "ingest"}})
	e := envFor(t, s)
	p := testenv.Start(t, "ingest-api", testenv.Binary(t, "ingest"), s.Env, "-role", "api")
	testenv.WaitReady(t, p, s.URLs["ingest"]+"/readyz", 30*time.Second)
	return e
}

func (e *env) receipt(t *testing.T, tx string) (state string, attempts int, lastError string) {
	t.Helper()
	r := e.do(t, http.MethodGet, "/api/ingest/transactions/"+tx, e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rc struct {
		State     string `json:"state"`
		Attempts  int    `json:"attempts"`
		LastError string `json:"last_error"`
	}
	r.json(t, &rc)
	return rc.State, rc.Attempts, rc.LastError
}

// bufferStats is the part of the site service's /buffer-stats these tests read.
type bufferStats struct {
	Archived    int        `json:"archived"`
	LastApplyAt *time.Time `json:"last_apply_at"`
	DeadLetters []struct {
		Error string `json:"error"`
	} `json:"dead_letters"`
}

func (e *env) bufferStats(t *testing.T) bufferStats {
	t.Helper()
	r := doURL(t, e.c, http.MethodGet, e.s.GatewayURL+"/buffer-stats", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var st bufferStats
	r.json(t, &st)
	return st
}

func (e *env) ingestAdmin(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "ingest"), append([]string{"admin"}, args...)...)
	for k, v := range e.s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "ingest admin %v: %s", args, errb.String())
	return out.String()
}

// startThenDelete acknowledges a start of obs unit ou and deletes its program (short name
// program, cascading to the obs unit) before the worker can apply it: the obs unit's row is
// locked (FOR UPDATE) from before the start until the delete commits, so the worker's foreign
// key check waits for the delete and then fails, however quickly the worker runs.
func startThenDelete(t *testing.T, e *env, ou int64, program string) answer {
	t.Helper()
	tx, err := e.db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT 1 FROM obs_units WHERE id = $1 FOR UPDATE`, ou)
	require.NoError(t, err)
	r := e.start(t, startBody(ou))
	_, err = tx.Exec(`DELETE FROM observing_programs WHERE short_name = $1`, program)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return r
}

// TestOutageRetriesAndDeadLetters: while the main database is unreachable tasks are retried,
// never dead-lettered, and drain by themselves once it is back; a task that can never apply (its
// obs unit was deleted) becomes a dead letter with its error, shown in the receipt, in
// /buffer-stats and by `ingest admin dead-letters`, which can retry it after a fix or drop it.
func TestOutageRetriesAndDeadLetters(t *testing.T) {
	e := newSplitEnv(t)
	st := e.start(t, startBody(e.obsUnit))
	r := e.do(t, http.MethodPost, "/raw_data_files/", e.token, fileBody(st.ID, "a.fits"))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var file answer
	r.json(t, &file)

	// A worker whose main database is unreachable (nothing listens there).
	down, _ := ingestProc(t, e.s, "worker", map[string]string{
		"OPS_MAIN_DATABASE_URL": "postgres://postgres@" + testenv.FreeAddr(t) + "/none?sslmode=disable&connect_timeout=1"})
	require.Eventually(t, func() bool {
		s, attempts, lastErr := e.receipt(t, file.TransactionID)
		return (s == "retrying" || s == "applying" || s == "buffered") && attempts >= 1 && lastErr != ""
	}, 30*time.Second, 100*time.Millisecond, "the receipt shows the failed attempts")
	// The worker does not retry task by task while the database is unreachable: the first
	// failure is retried within 2 s, then the tasks wait at the worker's gate for its probe —
	// active in the queue (applying), the wait noted as one attempt (of up to ~55 s). Polled: both
	// tasks reach that state, and their attempts then stay put while they wait.
	atGate := func(state, lastErr string) bool {
		return state == "applying" && strings.Contains(lastErr, "waiting for it to come back")
	}
	attempts := func() (startAttempts, fileAttempts int, waiting bool) {
		ss, sa, se := e.receipt(t, st.TransactionID)
		fs, fa, fe := e.receipt(t, file.TransactionID)
		return sa, fa, atGate(ss, se) && atGate(fs, fe)
	}
	var startAttempts, fileAttempts int
	require.Eventually(t, func() bool {
		var waiting bool
		startAttempts, fileAttempts, waiting = attempts()
		return waiting
	}, 30*time.Second, 100*time.Millisecond, "the tasks wait at the gate for the database")
	require.Never(t, func() bool {
		sa, fa, _ := attempts()
		return sa != startAttempts || fa != fileAttempts
	}, 2*time.Second, 100*time.Millisecond, "tasks must wait for the database, not retry one by one")
	_, _, lastErr := e.receipt(t, file.TransactionID)
	require.Contains(t, lastErr, "unreachable")
	stats := e.bufferStats(t)
	require.Zero(t, stats.Archived, "an outage never makes dead letters")
	require.False(t, stats.LastApplyAt != nil)
	require.NoError(t, down.Stop(10*time.Second))

	// The database is back (a worker that reaches it): the backlog drains by itself.
	ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, st.TransactionID)
	e.waitCommitted(t, file.TransactionID)
	stats = e.bufferStats(t)
	require.Zero(t, stats.Archived)
	require.NotNil(t, stats.LastApplyAt)

	// A start for an obs unit deleted before the worker applies it: a dead letter.
	ou2 := seedObsUnit(t, e.db, "P2")
	orphan := startThenDelete(t, e, ou2, "P2")
	require.Eventually(t, func() bool {
		s, _, _ := e.receipt(t, orphan.TransactionID)
		return s == "dead"
	}, 30*time.Second, 100*time.Millisecond)
	_, _, lastErr = e.receipt(t, orphan.TransactionID)
	require.Contains(t, lastErr, "23503")
	stats = e.bufferStats(t)
	require.Equal(t, 1, stats.Archived)
	require.Len(t, stats.DeadLetters, 1)
	require.Contains(t, stats.DeadLetters[0].Error, "obs_unit")
	list := e.ingestAdmin(t, "dead-letters", "list")
	var dl struct {
		TaskID        string `json:"task_id"`
		TransactionID string `json:"transaction_id"`
		Error         string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(list)), &dl), list)
	require.Equal(t, orphan.TransactionID, dl.TransactionID)
	require.Equal(t, "start:"+orphan.ID, dl.TaskID)

	// The operator restores the obs unit (same id) and retries: it applies.
	var src int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM sources LIMIT 1`).Scan(&src))
	_, err := e.db.Exec(`INSERT INTO observing_programs (id, short_name, title, pi) VALUES (9999, 'P2b', 't', 'pi')`)
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO obs_units (id, program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, 9999, 'u', $2, 11, 60)`, ou2, src)
	require.NoError(t, err)
	require.Contains(t, e.ingestAdmin(t, "dead-letters", "retry", "--id", dl.TaskID), "1 dead letter(s) requeued")
	e.waitCommitted(t, orphan.TransactionID)
	require.Zero(t, e.bufferStats(t).Archived)

	// Another dead letter, dropped.
	ou3 := seedObsUnit(t, e.db, "P3")
	gone := startThenDelete(t, e, ou3, "P3")
	require.Eventually(t, func() bool { return e.bufferStats(t).Archived == 1 }, 30*time.Second, 100*time.Millisecond)
	rdb := e.s.Redis.Client()
	require.True(t, rdb.HExists(context.Background(), "ingest:rec:start", gone.ID).Val(), "a dead letter's record is still cached")
	require.Contains(t, e.ingestAdmin(t, "dead-letters", "drop", "--all"), "1 dead letter(s) dropped")
	require.Zero(t, e.bufferStats(t).Archived)
	require.False(t, rdb.HExists(context.Background(), "ingest:rec:start", gone.ID).Val(), "a dropped write leaves the read cache")
	require.Zero(t, rdb.SCard(context.Background(), "ingest:ou:"+strconv.FormatInt(ou3, 10)).Val(), "and its index")
	require.Zero(t, e.count(t, `SELECT count(*) FROM executed_obs_units WHERE id = $1`, gone.ID))

	// Nothing is left dangling: every file's execution was recorded.
	require.NotContains(t, e.ingestAdmin(t, "orphans"), "file_without_execution")

	// The health report summarises the buffer.
	h := doURL(t, e.c, http.MethodGet, e.s.GatewayURL+"/health", "", nil)
	require.Contains(t, string(h.Body), `"buffer":{"pending":0`, "%s", h.Body)
}

// TestReadYourWritesAcrossAPIs: a write acknowledged by one API process is readable at once
// through another (no worker runs, so it can only come from the buffer), and reads say committed
// once a worker applied it.
func TestReadYourWritesAcrossAPIs(t *testing.T) {
	e := newSplitEnv(t)
	_, other := ingestProc(t, e.s, "api", nil)
	read := func(path string) response { return doURL(t, e.c, http.MethodGet, other+path, e.token, nil) }

	for i := range 20 {
		st := e.start(t, startBody(e.obsUnit)) // through the gateway to the first API process
		r := read("/executed_obs_units/" + strconv.FormatInt(e.obsUnit, 10) + "?limit=500")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), st.ID, "round %d", i)
		f := e.do(t, http.MethodPost, "/raw_data_files/", e.token, fileBody(st.ID, "f"+strconv.Itoa(i)))
		var fa answer
		f.json(t, &fa)
		r = read("/raw_data_files/" + fa.ID)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), `"buffer_status":"buffered"`)
		p := e.do(t, http.MethodPost, "/raw_data_package/", e.token, map[string]any{"executed_obs_unit_id": st.ID, "instrument_module_id": 11, "name": "p", "file_ids": []string{fa.ID}})
		var pa answer
		p.json(t, &pa)
		r = read("/raw_data_package/" + pa.ID)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), fa.ID)
		fin := e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "failed"})
		require.Equal(t, http.StatusCreated, fin.Status, "%s", fin.Body)
		r = read("/executed_obs_units/" + strconv.FormatInt(e.obsUnit, 10) + "?limit=500")
		require.Contains(t, string(r.Body), `"status":"failed"`)
		if i == 19 {
			ingestProc(t, e.s, "worker", nil)
			// The file and the package are separate transactions, applied in any order.
			e.waitCommitted(t, fa.TransactionID)
			e.waitCommitted(t, pa.TransactionID)
			r = read("/raw_data_files/" + fa.ID)
			require.Contains(t, string(r.Body), `"buffer_status":"committed"`)
			r = read("/raw_data_package/" + pa.ID)
			require.Contains(t, string(r.Body), fa.ID)
			require.Contains(t, string(r.Body), `"buffer_status":"committed"`)
		}
	}
}

// TestCatalogRefusesDeletingProgramWithExecutions: once an execution of one of its obs units is
// recorded, the catalog answers 409 to deleting the program (the foreign key of
// executed_obs_units), and deletes a program without executions.
func TestCatalogRefusesDeletingProgramWithExecutions(t *testing.T) {
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer"}})
	e := envFor(t, s)
	observer := s.JWT(t, "olivia", "observer")
	var prog, idle int64
	require.NoError(t, e.db.QueryRow(`SELECT program_id FROM obs_units WHERE id = $1`, e.obsUnit).Scan(&prog))
	st := e.start(t, startBody(e.obsUnit))
	e.waitCommitted(t, st.TransactionID)
	r := e.do(t, http.MethodDelete, "/observing_program/"+strconv.FormatInt(prog, 10), observer, nil)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM obs_units WHERE id = $1`, e.obsUnit))

	seedObsUnit(t, e.db, "IDLE")
	require.NoError(t, e.db.QueryRow(`SELECT id FROM observing_programs WHERE short_name = 'IDLE'`).Scan(&idle))
	r = e.do(t, http.MethodDelete, "/observing_program/"+strconv.FormatInt(idle, 10), observer, nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
}

// A -role worker process runs at OPS_INGEST_WORKER_NICE (default 10), every thread of it, so a
// burst is acknowledged first; the API process keeps the priority it was started with.
func TestWorkerRunsAtLowerPriority(t *testing.T) {
	e := newBenchEnv(t) // the API and the worker as two processes
	eou := e.start(t, startBody(e.obsUnit)).ID
	require.NotEmpty(t, eou)
	b := newBench(t, e, eou)
	nices := func(pid string) map[int]int {
		tasks, err := filepath.Glob("/proc/" + pid + "/task/*/stat")
		require.NoError(t, err)
		out := map[int]int{}
		for _, f := range tasks {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
			n, err := strconv.Atoi(fields[16]) // field 19 of stat: nice
			require.NoError(t, err)
			out[n]++
		}
		return out
	}
	require.NotZero(t, b.pids["worker"])
	worker, api := nices(strconv.Itoa(b.pids["worker"])), nices(strconv.Itoa(b.pids["ingest"]))
	require.Equal(t, map[int]int{10: worker[10]}, worker, "every worker thread at niceness 10")
	var own int
	for n := range nices("self") {
		own = n
	}
	require.Equal(t, map[int]int{own: api[own]}, api, "the API at the niceness it was started with")
}

// TestCoalescedWriteCannotApply: writes that reach the API together share a task (a round of the
// buffer); when one of them can never apply (its obs unit was deleted meanwhile), the worker
// applies the others and only that one becomes a dead letter — under its own task id, with its
// error in its own receipt — as if it had been held alone.
func TestCoalescedWriteCannotApply(t *testing.T) {
	e := newSplitEnv(t)
	good := e.start(t, startBody(e.obsUnit))
	ouGone := seedObsUnit(t, e.db, "GONE")
	// One doomed start first, alone: the API then knows the obs unit (its existence and modules
	// are remembered once seen), so the burst's doomed starts are validated as fast as the good
	// ones and reach the buffer in the same rounds, not after them (files no longer wait for a
	// query either: the committed filter).
	warm := e.start(t, startBody(ouGone))

	// A burst of writes, no worker yet, sent at once so that rounds mix them: files of a good
	// execution, good starts, and starts for the obs unit about to be deleted. A start's
	// validation looks the obs unit up in PostgreSQL, a file's looks its execution up in the
	// buffer, so starts and files may reach the buffer in separate rounds; the doomed starts
	// share their path with the good starts and land in rounds with them.
	const files, starts, bad = 60, 60, 6
	kind := func(i int) string {
		switch {
		case i < files:
			return "file"
		case i < files+starts:
			return "start"
		}
		return "doomed"
	}
	type sent struct {
		status int
		a      answer
	}
	results := make([]sent, files+starts+bad)
	order := rand.Perm(len(results))
	var wg sync.WaitGroup
	for _, i := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, body := "/raw_data_files/", fileBody(good.ID, "burst/"+strconv.Itoa(i)+".fits")
			switch kind(i) {
			case "start":
				path, body = "/executed_obs_units/start", startBody(e.obsUnit)
			case "doomed":
				path, body = "/executed_obs_units/start", startBody(ouGone)
			}
			b, _ := json.Marshal(body)
			req, _ := http.NewRequest(http.MethodPost, e.s.GatewayURL+path, bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+e.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.c.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			results[i].status = resp.StatusCode
			_ = json.NewDecoder(resp.Body).Decode(&results[i].a)
		}()
	}
	wg.Wait()
	var badTx, goodTx []string
	badIDs := map[string]bool{}
	for i, r := range results {
		require.Equal(t, http.StatusCreated, r.status, "write %d", i)
		if kind(i) == "doomed" {
			badTx, badIDs[r.a.ID] = append(badTx, r.a.TransactionID), true
		} else {
			goodTx = append(goodTx, r.a.TransactionID)
		}
	}
	require.Len(t, badTx, bad)
	badTx, badIDs[warm.ID] = append(badTx, warm.TransactionID), true

	// The burst was coalesced, and some task mixes a doomed start with good writes.
	insp := asynq.NewInspectorFromRedisClient(e.s.Redis.Client())
	tasks, err := insp.ListPendingTasks("ingest", asynq.PageSize(1000))
	require.NoError(t, err)
	require.Less(t, len(tasks), len(results), "concurrent writes share tasks")
	mixed := false
	for _, task := range tasks {
		if task.Type != "ingest:writes" {
			continue
		}
		var p struct {
			Writes []struct {
				Type    string `json:"type"`
				Payload struct {
					Start struct {
						ObsUnitID int64 `json:"obs_unit_id"`
					} `json:"start"`
				} `json:"payload"`
			} `json:"writes"`
		}
		require.NoError(t, json.Unmarshal(task.Payload, &p))
		doomed, other := false, false
		for _, w := range p.Writes {
			if w.Type == "ingest:start" && w.Payload.Start.ObsUnitID == ouGone {
				doomed = true
			} else {
				other = true
			}
		}
		mixed = mixed || (doomed && other)
	}
	require.True(t, mixed, "no task mixed a doomed start with good writes (%d tasks for %d writes)", len(tasks), len(results))

	_, err = e.db.Exec(`DELETE FROM observing_programs WHERE short_name = 'GONE'`) // cascades to the obs unit
	require.NoError(t, err)
	ingestProc(t, e.s, "worker", nil)
	for _, tx := range goodTx {
		e.waitCommitted(t, tx)
	}
	require.Equal(t, files, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE 'burst/%'`))
	require.Equal(t, starts+1, e.count(t, `SELECT count(*) FROM executed_obs_units WHERE obs_unit_id = $1`, e.obsUnit))
	for _, tx := range badTx {
		require.Eventually(t, func() bool {
			s, _, _ := e.receipt(t, tx)
			return s == "dead"
		}, 30*time.Second, 50*time.Millisecond, "transaction %s", tx)
		_, _, lastErr := e.receipt(t, tx)
		require.Contains(t, lastErr, "23503")
	}
	list := strings.Split(strings.TrimSpace(e.ingestAdmin(t, "dead-letters", "list")), "\n")
	require.Len(t, list, bad+1, "only the writes at fault are dead letters")
	for _, line := range list {
		var dl struct {
			TaskID string `json:"task_id"`
			Type   string `json:"type"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &dl), line)
		require.Equal(t, "ingest:start", dl.Type)
		require.True(t, badIDs[strings.TrimPrefix(dl.TaskID, "start:")], "dead letter %s is one of the doomed starts", dl.TaskID)
	}
	require.Zero(t, e.count(t, `SELECT count(*) FROM executed_obs_units WHERE obs_unit_id = $1`, ouGone))
}

// TestReadsNeverGoBackwards: while the worker commits and evicts finishes as they arrive, every
// read of an obs unit's executions right after a finish's 201 shows the execution finished —
// whichever of the buffer and the database holds the finish at that moment. Many executions at
// once, each read several times, so that reads land in the moment between a commit and its
// eviction.
func TestReadsNeverGoBackwards(t *testing.T) {
	e := newEnv(t, nil)
	list := "/executed_obs_units/" + strconv.FormatInt(e.obsUnit, 10) + "?limit=500"
	var wg sync.WaitGroup
	var mu sync.Mutex
	var backwards []string
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				st := e.start(t, startBody(e.obsUnit))
				e.waitCommitted(t, st.TransactionID)
				fin := e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "aborted"})
				if fin.Status != http.StatusCreated {
					t.Errorf("finish: %d %s", fin.Status, fin.Body)
					return
				}
				for range 6 {
					var page struct {
						Items []struct {
							ID     string `json:"id"`
							Status string `json:"status"`
						} `json:"items"`
					}
					e.do(t, http.MethodGet, list, e.token, nil).json(t, &page)
					for _, it := range page.Items {
						if it.ID == st.ID && it.Status != "aborted" {
							mu.Lock()
							backwards = append(backwards, fmt.Sprintf("goroutine %d round %d: %s read %q", g, i, st.ID, it.Status))
							mu.Unlock()
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, backwards, "a read showed a finished execution as running")
}
