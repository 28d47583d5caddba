package ingest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
)

// Issue 23, rule 4 (catalog side): an obs unit referenced by an execution — committed, or a
// start still buffered — is never deleted, so no acknowledged start becomes a dead letter.

// conflictProblem is a 409's body with the executions it names.
type conflictProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
		Value    any    `json:"value"`
	} `json:"errors"`
}

// requireNamesExecutions checks a 409 that names execution id (state: buffered or committed) at
// location.
func requireNamesExecutions(t *testing.T, r response, location, state string, ids ...string) {
	t.Helper()
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	var p conflictProblem
	r.json(t, &p)
	var values []any
	for _, e := range p.Errors {
		require.Equal(t, location, e.Location, "%s", r.Body)
		values = append(values, e.Value)
	}
	for _, id := range ids {
		require.Contains(t, p.Detail, id+" ("+state+")")
		require.Contains(t, values, id, "%s", r.Body)
	}
	require.Contains(t, p.Detail, "archived", "the refusal says what to do instead")
}

// newCatalogSplitEnv is newEnv with the catalog running and the suite's ingest as API only: no
// worker applies anything until the test starts one.
func newCatalogSplitEnv(t *testing.T) *env {
	t.Helper()
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "ingest"}})
	e := envFor(t, s)
	p := testenv.Start(t, "ingest-api", testenv.Binary(t, "ingest"), s.Env, "-role", "api")
	testenv.WaitReady(t, p, s.URLs["ingest"]+"/readyz", 30*time.Second)
	return e
}

func (e *env) programOf(t *testing.T, obsUnit int64) int64 {
	t.Helper()
	var prog int64
	require.NoError(t, e.db.QueryRow(`SELECT program_id FROM obs_units WHERE id = $1`, obsUnit).Scan(&prog))
	return prog
}

// TestCatalogDeleteWithStartBuffered: with the worker behind, a start acknowledged (201 buffered)
// makes deleting its program — or a PUT dropping its obs unit — a 409 naming the execution
// (buffered); once the worker applied it, still 409 (committed); the start is applied, never a
// dead letter. A program without executions is deleted, and a start of its obs unit is then
// refused (422), even by an API process that had seen the obs unit exist.
func TestCatalogDeleteWithStartBuffered(t *testing.T) {
	e := newCatalogSplitEnv(t)
	observer := e.s.JWT(t, "olivia", "observer")
	prog := e.programOf(t, e.obsUnit)
	path := "/observing_program/" + strconv.FormatInt(prog, 10)

	st := e.start(t, startBody(e.obsUnit))
	require.Equal(t, "buffered", st.Status)
	requireNamesExecutions(t, e.do(t, http.MethodDelete, path, observer, nil), "path.id", "buffered", st.ID)
	var src int64
	require.NoError(t, e.db.QueryRow(`SELECT source_id FROM obs_units WHERE id = $1`, e.obsUnit).Scan(&src))
	put := map[string]any{"short_name": "P1", "title": "t", "pi": "pi", "status": "draft", "obs_units": []map[string]any{
		{"name": "other", "source_id": src, "instrument_module_id": 11, "duration_s": 60}}}
	requireNamesExecutions(t, e.do(t, http.MethodPut, path, observer, put), "body.obs_units", "buffered", st.ID)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM obs_units WHERE id = $1`, e.obsUnit), "nothing was deleted")
	require.Zero(t, e.count(t, `SELECT count(*) FROM obs_units WHERE name = 'other'`), "the refused PUT changed nothing")

	// The fences of the refused deletes were released: starts are held again.
	st2 := e.start(t, startBody(e.obsUnit))

	// The worker catches up: the starts apply, and the delete is still refused (committed).
	ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, st.TransactionID)
	e.waitCommitted(t, st2.TransactionID)
	requireNamesExecutions(t, e.do(t, http.MethodDelete, path, observer, nil), "path.id", "committed", st.ID, st2.ID)
	require.Zero(t, e.bufferStats(t).Archived, "no acknowledged start became a dead letter")
	// The obs unit's source cannot go either: the refusal names the executions too.
	r := e.do(t, http.MethodDelete, "/sources/"+strconv.FormatInt(src, 10), observer, nil)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), st.ID)

	// Archiving instead of deleting.
	put["obs_units"] = []map[string]any{{"name": "u1", "source_id": src, "instrument_module_id": 11, "duration_s": 600}}
	put["status"] = "archived"
	r = e.do(t, http.MethodPut, path, observer, put)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"status":"archived"`)

	// A program without executions is deleted. This API process has seen its obs unit exist (a
	// start refused for its module), and still refuses a start after the delete.
	idle := seedObsUnit(t, e.db, "IDLE")
	bad := startBody(idle)
	bad["instrument_module_id"] = 99999
	require.Equal(t, http.StatusUnprocessableEntity, e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, bad).Status)
	r = e.do(t, http.MethodDelete, "/observing_program/"+strconv.FormatInt(e.programOf(t, idle), 10), observer, nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusUnprocessableEntity, e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, startBody(idle)).Status)
	noModule := startBody(idle) // an instrument names its module (ownership): refused before any lookup
	delete(noModule, "instrument_module_id")
	r = e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, noModule)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	v, err := e.s.Redis.Client().Get(context.Background(), "ingest:fence:ou:"+strconv.FormatInt(idle, 10)).Result()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(v, "deleted:"), "the delete left a tombstone: %q", v)
	require.Zero(t, e.bufferStats(t).Archived)
}

// TestObsUnitFenceRefusesStarts: while a delete holds its fence, a start of the obs unit is
// refused 409 (retry) — and held again once the fence is released; the fence routes are
// internal: refused without the internal secret, and never routed by the gateway.
func TestObsUnitFenceRefusesStarts(t *testing.T) {
	e := newSplitEnv(t) // no worker: the start stays buffered
	ingest := e.s.URLs["ingest"]
	secret := []string{contract.InternalSecretHeader, e.s.Env["OPS_INTERNAL_SECRET"]}
	req := contract.FenceRequest{Token: "0123456789abcdef0123", ObsUnitIDs: []int64{e.obsUnit}}

	// Internal only.
	require.Equal(t, http.StatusForbidden, doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitFencePath, "", req).Status)
	require.Equal(t, http.StatusForbidden, doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitFencePath, "", req,
		contract.InternalSecretHeader, strings.Repeat("x", 64)).Status)
	require.Equal(t, http.StatusNotFound, e.do(t, http.MethodPost, contract.ObsUnitFencePath, e.token, req, secret...).Status)

	st := e.start(t, startBody(e.obsUnit))
	r := doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitFencePath, "", req, secret...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var fa contract.FenceAnswer
	r.json(t, &fa)
	require.Equal(t, []contract.FencedExecution{{ID: st.ID, ObsUnitID: e.obsUnit}}, fa.Executions)

	r = e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, startBody(e.obsUnit))
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), fmt.Sprintf("obs unit %d is being deleted", e.obsUnit))
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	// A replay of a start held before the fence is still answered as held.
	again := startBody(e.obsUnit)
	again["id"] = st.ID
	require.Equal(t, http.StatusCreated, e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, again).Status)

	// Another delete's seal or release leaves this one's fence alone.
	other := contract.FenceRequest{Token: "ffffffffffffffffffff", ObsUnitIDs: req.ObsUnitIDs}
	require.Equal(t, http.StatusConflict, doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitSealPath, "", other, secret...).Status)
	require.Equal(t, http.StatusNoContent, doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitReleasePath, "", other, secret...).Status)
	require.Equal(t, http.StatusConflict, e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, startBody(e.obsUnit)).Status)

	require.Equal(t, http.StatusNoContent, doURL(t, e.c, http.MethodPost, ingest+contract.ObsUnitReleasePath, "", req, secret...).Status)
	e.start(t, startBody(e.obsUnit))
}

// TestCatalogDeletesRaceStarts: starts and program deletes racing in goroutines: every start
// acknowledged is applied, none is a dead letter, and a program is deleted only if no start of
// it was acknowledged.
func TestCatalogDeletesRaceStarts(t *testing.T) {
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer"}})
	e := envFor(t, s)
	observer := s.JWT(t, "olivia", "observer")
	const programs, startersEach, startsEach = 12, 2, 4

	type result struct {
		acked   []answer
		deleted bool
	}
	results := make([]result, programs)
	refusedStarts := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range programs {
		ou := seedObsUnit(t, e.db, fmt.Sprintf("RACE-%d", i))
		prog := e.programOf(t, ou)
		for range startersEach {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
				for range startsEach {
					r := doURL(t, e.c, http.MethodPost, e.s.GatewayURL+"/executed_obs_units/start", e.token, startBody(ou))
					switch r.Status {
					case http.StatusCreated:
						var a answer
						r.json(t, &a)
						mu.Lock()
						results[i].acked = append(results[i].acked, a)
						mu.Unlock()
					case http.StatusConflict, http.StatusUnprocessableEntity: // being deleted, deleted
						mu.Lock()
						refusedStarts[r.Status]++
						mu.Unlock()
					default:
						t.Errorf("start: %d %s", r.Status, r.Body)
					}
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
			for range 20 {
				r := doURL(t, e.c, http.MethodDelete, e.s.GatewayURL+"/observing_program/"+strconv.FormatInt(prog, 10), observer, nil)
				switch r.Status {
				case http.StatusNoContent:
					mu.Lock()
					results[i].deleted = true
					mu.Unlock()
					return
				case http.StatusConflict:
					if strings.Contains(string(r.Body), "cannot be deleted") {
						return // refused, naming executions
					}
				case http.StatusServiceUnavailable: // fences lost to another delete: retry
				default:
					t.Errorf("delete: %d %s", r.Status, r.Body)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	deleted, refused := 0, 0
	for i, r := range results {
		for _, a := range r.acked {
			e.waitCommitted(t, a.TransactionID)
		}
		if r.deleted {
			deleted++
			require.Empty(t, r.acked, "program %d was deleted although a start of it was acknowledged", i)
		} else {
			refused++
		}
	}
	t.Logf("%d programs deleted, %d refused; starts refused: %d while being deleted (409), %d deleted (422)",
		deleted, refused, refusedStarts[http.StatusConflict], refusedStarts[http.StatusUnprocessableEntity])
	require.Zero(t, e.bufferStats(t).Archived, "no acknowledged start is a dead letter")
	require.Zero(t, e.s.Redis.Client().ZCard(context.Background(), "asynq:{ingest}:archived").Val())
}
