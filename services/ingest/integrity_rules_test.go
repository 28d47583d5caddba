package ingest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

// Issue 23, rules 1–4 for ingest: the refusals at acknowledgement (status and named field), the
// races decided by the hold script's claims, and the worker storing what it cannot refuse any
// more (flagged, or kept in ingest_collisions) instead of dead-lettering an acknowledged write.

// detail is a problem answer's detail.
func (r response) detail(t *testing.T) string {
	t.Helper()
	var p struct {
		Detail string `json:"detail"`
	}
	r.json(t, &p)
	return p.Detail
}

func (e *env) post(t *testing.T, path string, body any) response {
	t.Helper()
	return e.do(t, http.MethodPost, path, e.token, body)
}

func (e *env) created(t *testing.T, path string, body any) answer {
	t.Helper()
	r := e.post(t, path, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a answer
	r.json(t, &a)
	return a
}

func pkgBody(eou, name string, files ...string) map[string]any {
	return map[string]any{"executed_obs_unit_id": eou, "instrument_module_id": 11, "name": name, "file_ids": files}
}

func withID(b map[string]any, id string) map[string]any { b["id"] = id; return b }

// TestIntegrityRefusals: each rule's refusal, with its status and the field it names, while the
// records involved are still buffered (API only, no worker) and again once they are committed.
func TestIntegrityRefusals(t *testing.T) {
	e := newSplitEnv(t)
	st := e.start(t, startBody(e.obsUnit))
	other := e.start(t, startBody(e.obsUnit))
	f1 := e.created(t, "/raw_data_files/", fileBody(st.ID, "2026/11/25/scan1/a.fits"))
	f2 := e.created(t, "/raw_data_files/", fileBody(st.ID, "2026/11/25/scan1/b.fits"))
	foreign := e.created(t, "/raw_data_files/", fileBody(other.ID, "2026/11/25/scan2/a.fits"))
	p1 := e.created(t, "/raw_data_package/", pkgBody(st.ID, "scan1", f1.ID))

	check := func(stage string) {
		// Rule 1: a file in another package → 409 listing it.
		r := e.post(t, "/raw_data_package/", pkgBody(st.ID, "scan1-again", f2.ID, f1.ID))
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		require.Contains(t, r.detail(t), f1.ID, stage)
		require.Contains(t, r.detail(t), p1.ID, stage)
		require.NotContains(t, r.detail(t), f2.ID, stage)
		// A file of another execution → 422 naming its position.
		r = e.post(t, "/raw_data_package/", pkgBody(st.ID, "mixed", f2.ID, foreign.ID))
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", stage, r.Body)
		require.Equal(t, []string{"body.file_ids[1]"}, r.locations(t), stage)
		// A file id neither committed nor buffered → 422.
		r = e.post(t, "/raw_data_package/", pkgBody(st.ID, "ghost", ingest.NewID()))
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", stage, r.Body)
		require.Equal(t, []string{"body.file_ids[0]"}, r.locations(t), stage)
		// A package name unique within its execution → 409 naming the package.
		r = e.post(t, "/raw_data_package/", pkgBody(st.ID, "scan1"))
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		require.Contains(t, r.detail(t), p1.ID, stage)
		require.Contains(t, r.detail(t), "body.name", stage)
		// The same name in another execution is another package (checked, not created: no worker
		// difference matters here).
		// A registration naming a package of another execution → 422.
		r = e.post(t, "/raw_data_files/", map[string]any{"executed_obs_unit_id": other.ID, "instrument_module_id": 11,
			"path": "2026/11/25/scan2/z-" + stage + ".fits", "size_bytes": 1, "checksum": "sha256:" + strings.Repeat("ab", 32), "raw_data_package_id": p1.ID})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", stage, r.Body)
		require.Equal(t, []string{"body.raw_data_package_id"}, r.locations(t), stage)
		// Rule 2: a path registered under another id → 409 naming the existing id.
		r = e.post(t, "/raw_data_files/", fileBody(st.ID, "2026/11/25/scan1/a.fits"))
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		require.Contains(t, r.detail(t), f1.ID, stage)
		require.Contains(t, r.detail(t), "body.path", stage)
		r = e.post(t, "/raw_data_files/bulk", map[string]any{"files": []any{fileBody(st.ID, "2026/11/25/scan1/new-"+stage+".fits"), fileBody(st.ID, "2026/11/25/scan1/b.fits")}})
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		require.Contains(t, r.detail(t), "body.files[1].path", stage)
		require.Contains(t, r.detail(t), f2.ID, stage)
		// The same path on another module is another file; the same path, id and content a replay.
		again := withID(fileBody(st.ID, "2026/11/25/scan1/a.fits"), f1.ID)
		r = e.post(t, "/raw_data_files/", again)
		require.Equal(t, http.StatusCreated, r.Status, "%s: the same path, id and content is a replay: %s", stage, r.Body)
		// Rule 3: finishing twice with another body → 409.
		r = e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "failed"})
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		// An end before the start → 422 naming body.end_time.
		r = e.do(t, http.MethodPut, "/executed_obs_units/"+other.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T00:00:00Z"})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", stage, r.Body)
		require.Equal(t, []string{"body.end_time"}, r.locations(t), stage)
	}
	fin := e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T01:30:00Z"})
	require.Equal(t, http.StatusCreated, fin.Status, "%s", fin.Body)
	var finA answer
	fin.json(t, &finA)
	require.Equal(t, "buffered", finA.Status)
	check("buffered")

	ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, finA.TransactionID)
	e.waitCommitted(t, p1.TransactionID)
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM raw_data_files WHERE executed_obs_unit_id IN ($1, $2)`, st.ID, other.ID) == 3
	}, 30*time.Second, 50*time.Millisecond)
	check("committed")

	// PUT /raw_data_files/{id} naming a package: of another execution → 422; when the file is
	// in another package → 409.
	p2 := e.created(t, "/raw_data_package/", pkgBody(st.ID, "scan1-b"))
	r := e.do(t, http.MethodPut, "/raw_data_files/"+foreign.ID, e.token, map[string]any{"raw_data_package_id": p2.ID})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Equal(t, []string{"body.raw_data_package_id"}, r.locations(t))
	r = e.do(t, http.MethodPut, "/raw_data_files/"+f1.ID, e.token, map[string]any{"raw_data_package_id": p2.ID})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.detail(t), f1.ID)
	r = e.do(t, http.MethodPut, "/raw_data_files/"+f2.ID, e.token, map[string]any{"raw_data_package_id": p2.ID})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// Finalize adding a file of another package → 409, and nothing changes.
	r = e.do(t, http.MethodPut, "/raw_data_package/"+p2.ID+"/finalize", e.token, map[string]any{"size_bytes": 10, "checksum": "sha256:" + strings.Repeat("cd", 32), "file_ids": []string{f1.ID}})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.detail(t), f1.ID)

	require.Zero(t, e.bufferStats(t).Archived, "nothing dead-lettered")
	require.Zero(t, e.count(t, `SELECT count(*) FROM ingest_collisions`))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_package_files WHERE package_id = $1`, p1.ID))
}

// TestConcurrentClaimsOneWinner: clients racing — two packages for one file, two registrations of
// one path under two ids, two packages of one name in one execution — get exactly one 201 and one
// 409 naming the winner, however close together they arrive; once the worker has drained, nothing
// is dead-lettered, nothing collided, and the database holds the winners.
func TestConcurrentClaimsOneWinner(t *testing.T) {
	e := newSplitEnv(t)
	st := e.start(t, startBody(e.obsUnit))
	const pairs = 20
	var files []answer
	for i := range pairs {
		files = append(files, e.created(t, "/raw_data_files/", fileBody(st.ID, "race/f"+strconv.Itoa(i)+".fits")))
	}
	type result struct {
		status int
		body   []byte
	}
	post := func(path string, body any) result {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, e.s.GatewayURL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.c.Do(req)
		if err != nil {
			return result{status: -1, body: []byte(err.Error())}
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return result{resp.StatusCode, rb}
	}
	// race runs the two requests of each pair at once and returns their answers.
	race := func(reqs func(i, side int) (string, any)) [pairs][2]result {
		var out [pairs][2]result
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range pairs {
			for side := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path, body := reqs(i, side)
					<-gate
					out[i][side] = post(path, body)
				}()
			}
		}
		close(gate)
		wg.Wait()
		return out
	}
	var txs []string
	// winner checks one 201 and one 409 whose detail names the winner's id, and returns the
	// winner's side and id.
	winner := func(what string, i int, rs [2]result, named func(side int) string) (int, string) {
		w := -1
		for side, r := range rs {
			if r.status == http.StatusCreated {
				require.Equal(t, -1, w, "%s %d: two 201s", what, i)
				w = side
			}
		}
		require.NotEqual(t, -1, w, "%s %d: no 201: %d %s / %d %s", what, i, rs[0].status, rs[0].body, rs[1].status, rs[1].body)
		loser := rs[1-w]
		require.Equal(t, http.StatusConflict, loser.status, "%s %d: %s", what, i, loser.body)
		require.Contains(t, string(loser.body), named(w), "%s %d: the 409 names the winner", what, i)
		var a answer
		require.NoError(t, json.Unmarshal(rs[w].body, &a))
		txs = append(txs, a.TransactionID)
		return w, a.ID
	}

	// Two packages claiming one file.
	pkgIDs := [pairs][2]string{}
	for i := range pairs {
		pkgIDs[i] = [2]string{ingest.NewID(), ingest.NewID()}
	}
	pkgWinners := map[string]string{} // file → package
	rs := race(func(i, side int) (string, any) {
		return "/raw_data_package/", withID(pkgBody(st.ID, "race-pkg-"+strconv.Itoa(i)+"-"+strconv.Itoa(side), files[i].ID), pkgIDs[i][side])
	})
	for i, r := range rs {
		_, id := winner("package", i, r, func(side int) string { return pkgIDs[i][side] })
		pkgWinners[files[i].ID] = id
	}

	// One path under two ids.
	fileIDs := [pairs][2]string{}
	for i := range pairs {
		fileIDs[i] = [2]string{ingest.NewID(), ingest.NewID()}
	}
	pathWinners := map[string]string{}
	rs = race(func(i, side int) (string, any) {
		return "/raw_data_files/", withID(fileBody(st.ID, "race/p"+strconv.Itoa(i)+".fits"), fileIDs[i][side])
	})
	for i, r := range rs {
		_, id := winner("path", i, r, func(side int) string { return fileIDs[i][side] })
		pathWinners["race/p"+strconv.Itoa(i)+".fits"] = id
	}

	// One package name twice in an execution.
	nameIDs := [pairs][2]string{}
	for i := range pairs {
		nameIDs[i] = [2]string{ingest.NewID(), ingest.NewID()}
	}
	nameWinners := map[string]string{}
	rs = race(func(i, side int) (string, any) {
		return "/raw_data_package/", withID(pkgBody(st.ID, "race-name-"+strconv.Itoa(i)), nameIDs[i][side])
	})
	for i, r := range rs {
		_, id := winner("name", i, r, func(side int) string { return nameIDs[i][side] })
		nameWinners["race-name-"+strconv.Itoa(i)] = id
	}

	ingestProc(t, e.s, "worker", nil)
	for _, tx := range txs {
		e.waitCommitted(t, tx)
	}
	require.Zero(t, e.bufferStats(t).Archived, "nothing dead-lettered")
	require.Zero(t, e.count(t, `SELECT count(*) FROM ingest_collisions`), "nothing collided in the worker")
	for f, p := range pkgWinners {
		require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_package_files WHERE file_id = $1 AND package_id = $2`, f, p))
	}
	for path, id := range pathWinners {
		require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path = $1 AND id = $2`, path, id))
		require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path = $1`, path))
	}
	for name, id := range nameWinners {
		require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_packages WHERE name = $1 AND id = $2`, name, id))
	}
	// Every claim is due for release with its records (buffer.claimGrace later): the rules then
	// rest on the database.
	require.Eventually(t, func() bool {
		rdb := e.s.Redis.Client()
		due := 0 // the claims of the batches waiting for release (buffer.queueRemoval)
		for _, batch := range rdb.ZRange(t.Context(), "ingest:claims:release", 0, -1).Val() {
			var claims [][2]string
			require.NoError(t, json.Unmarshal([]byte(rdb.Get(t.Context(), "ingest:claims:batch:"+batch).Val()), &claims))
			due += len(claims)
		}
		return rdb.HLen(t.Context(), "ingest:claims").Val() == int64(due)
	}, 10*time.Second, 50*time.Millisecond, "claims not due for release after the drain")
	r := e.post(t, "/raw_data_files/", fileBody(st.ID, "race/p0.fits"))
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.detail(t), pathWinners["race/p0.fits"])
}

// TestFinishBeforeStartFlaggedByWorker: a finish acknowledged where its start was not known (here
// enqueued as another site's buffer would deliver it) ending before the start the worker applies
// is stored flagged inconsistent — the start's write committed, nothing dead-lettered — and the
// worker's gauge counts it.
func TestFinishBeforeStartFlaggedByWorker(t *testing.T) {
	e := newSplitEnv(t)
	st := e.start(t, startBody(e.obsUnit)) // start_time 01:00
	at := time.Now().UTC()
	payload, err := json.Marshal(ingest.FinishTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: at}, ID: st.ID,
		Finish: ingest.Finish{EndTime: time.Date(2026, 11, 25, 0, 30, 0, 0, time.UTC), Status: ingest.StatusCompleted, Meta: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	client := asynq.NewClientFromRedisClient(e.s.Redis.Client())
	_, err = client.Enqueue(asynq.NewTask(ingest.TaskFinish, payload), asynq.Queue(ingest.Queue), asynq.TaskID(ingest.FinishTaskID(st.ID)))
	require.NoError(t, err)

	_, url := ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, st.TransactionID)
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM executed_obs_units WHERE id = $1 AND end_time IS NOT NULL AND start_time IS NOT NULL`, st.ID) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM executed_obs_units WHERE id = $1 AND inconsistent IS NOT NULL`, st.ID))
	require.Zero(t, e.bufferStats(t).Archived, "nothing dead-lettered")
	require.Eventually(t, func() bool { // the read says so, once the buffer has let go of the start
		r := e.do(t, http.MethodGet, "/executed_obs_units/"+strconv.FormatInt(e.obsUnit, 10), e.token, nil)
		return r.Status == http.StatusOK && strings.Contains(string(r.Body), `"inconsistent":"`)
	}, 30*time.Second, 50*time.Millisecond)
	r := doURL(t, e.c, http.MethodGet, url+"/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), "obsops_ingest_inconsistent_executions 1")
	require.Contains(t, string(r.Body), "obsops_ingest_collisions 0")
}

// TestDirectWritesRespectBufferedClaims: a file a package still in the buffer was given cannot be
// put into another package by the direct writes (PUT /raw_data_files/{id}, finalize): 409 naming
// the package that has it, though the database does not know of it yet.
func TestDirectWritesRespectBufferedClaims(t *testing.T) {
	e := newSplitEnv(t)
	st := e.start(t, startBody(e.obsUnit))
	f := e.created(t, "/raw_data_files/", fileBody(st.ID, "claims/a.fits"))
	p := e.created(t, "/raw_data_package/", pkgBody(st.ID, "p", f.ID))
	q := e.created(t, "/raw_data_package/", pkgBody(st.ID, "q"))
	r := e.do(t, http.MethodPut, "/raw_data_files/"+f.ID, e.token, map[string]any{"raw_data_package_id": q.ID})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.detail(t), p.ID)
	r = e.do(t, http.MethodPut, "/raw_data_package/"+q.ID+"/finalize", e.token, map[string]any{"size_bytes": 10, "checksum": "sha256:" + strings.Repeat("cd", 32), "file_ids": []string{f.ID}})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.detail(t), p.ID)
	ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, p.TransactionID)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_package_files WHERE file_id = $1 AND package_id = $2`, f.ID, p.ID))
	require.Zero(t, e.count(t, `SELECT count(*) FROM ingest_collisions`))
	require.Zero(t, e.bufferStats(t).Archived)
}
