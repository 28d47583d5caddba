package ingest_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// TestCommittedFilter: at the main site a registration of a new path is acknowledged without a
// query (the API's committed filter rules committed files out), one of a committed path goes to
// the database once its claim is gone (409 for another id, 201 for the replay); an API started
// again builds its filter from the committed rows, with their paths; and the files a secondary site's replay commits (a
// worker connection naming its site) are learnt within a second, so the main refuses their
// paths too.
func TestCommittedFilter(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	rdb := e.s.Redis.Client()
	metric := func(name string) int {
		r := doURL(t, e.c, http.MethodGet, e.s.URLs["ingest"]+"/metrics", "", nil)
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(string(r.Body))
		require.NotNil(t, m, "metric %s in %s", name, r.Body)
		n, _ := strconv.Atoi(m[1])
		return n
	}
	checks := func(by string) int { return metric(`obsops_ingest_committed_checks_total{by="` + by + `"}`) }
	ready := func() bool { return metric("obsops_ingest_committed_filter_ready") == 1 }
	require.Eventually(t, ready, 15*time.Second, 20*time.Millisecond, "the API builds the filter at start")

	st := e.start(t, startBody(e.obsUnit))
	filter, database := checks("filter"), checks("database")
	var first answer
	for i := range 20 {
		a := e.created(t, "/raw_data_files/", fileBody(st.ID, "filter/new-"+strconv.Itoa(i)+".fits"))
		if i == 0 {
			first = a
		}
	}
	e.created(t, "/raw_data_files/bulk", map[string]any{"files": []any{fileBody(st.ID, "filter/bulk-1.fits"), fileBody(st.ID, "filter/bulk-2.fits")}})
	// New paths: ruled out by the filter (its false positives, under 1%, may send one to the database).
	require.GreaterOrEqual(t, checks("filter")-filter, 20, "new paths need no query")
	require.LessOrEqual(t, checks("database")-database, 1)
	e.waitCommitted(t, first.TransactionID)
	// The claims' grace over (30 s after the commit, claimGrace): only the filter and the
	// database stand between a committed path and another file.
	graceOver := func() { require.NoError(t, rdb.Del(ctx, "ingest:claims").Err()) }
	graceOver()

	path := "filter/new-0.fits"
	refused := func(stage string) {
		t.Helper()
		r := e.post(t, "/raw_data_files/", fileBody(st.ID, path))
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", stage, r.Body)
		require.Contains(t, r.detail(t), first.ID, stage)
		require.Contains(t, r.detail(t), "body.path", stage)
	}
	database = checks("database")
	refused("committed path, filter built")
	r := e.post(t, "/raw_data_files/", withID(fileBody(st.ID, path), first.ID))
	require.Equal(t, http.StatusCreated, r.Status, "the same id, path and content is a replay: %s", r.Body)
	require.Equal(t, database+1, checks("database"), "the replay was looked up; the refusal is not counted")

	// Ids: the API's own (version 7) are not in the filter, a client naming one is checked in the
	// database; a client's own id (here version 4) is, so the same id with other content is sent
	// to the database too.
	r = e.post(t, "/raw_data_files/", withID(fileBody(st.ID, "filter/other-path.fits"), first.ID))
	require.Equal(t, http.StatusConflict, r.Status, "an API-assigned id with other content: %s", r.Body)
	require.Contains(t, r.detail(t), "body.id")
	own := uuid.NewString()
	a := e.created(t, "/raw_data_files/", withID(fileBody(st.ID, "filter/own.fits"), own))
	e.waitCommitted(t, a.TransactionID)
	graceOver()
	require.Eventually(t, func() bool {
		r = e.post(t, "/raw_data_files/", withID(fileBody(st.ID, "filter/own-other.fits"), own))
		return r.Status == http.StatusConflict
	}, 5*time.Second, 20*time.Millisecond, "a client's committed id with other content, learnt from the worker's stream: %s", r.Body)
	require.Contains(t, r.detail(t), "body.id")

	// The API started again builds its filter from the database: with the committed paths.
	p := e.s.Procs["ingest"]
	require.NoError(t, p.Stop(5*time.Second))
	p = testenv.Start(t, "ingest", testenv.Binary(t, "ingest"), e.s.Env, "-role", "all")
	e.s.Procs["ingest"] = p
	testenv.WaitReady(t, p, e.s.URLs["ingest"]+"/readyz", 30*time.Second)
	require.Eventually(t, ready, 15*time.Second, 20*time.Millisecond, "the API builds the filter again")
	refused("filter rebuilt")
	database = checks("database")
	e.created(t, "/raw_data_files/", fileBody(st.ID, "filter/after-restart.fits"))
	require.Equal(t, database, checks("database"), "a new path needs no query again")

	// A secondary site's replay: its worker's connection names its site (obsops.origin_site), the
	// trigger lists its files, the main's API learns them and empties the list.
	replay, err := postgres.OpenWorkerDB(e.s.DatabaseURL, 1, 10*time.Second, "observatory")
	require.NoError(t, err)
	t.Cleanup(func() { _ = replay.Close() })
	replayed := ingest.NewID()
	body := `{"id":"` + replayed + `","executed_obs_unit_id":"` + st.ID + `","instrument_module_id":11,"path":"filter/replayed.fits","size_bytes":1,"checksum":"sha256:` + strings.Repeat("ab", 32) + `"}`
	_, err = (&postgres.Applier{DB: replay, BatchRows: 5000}).ApplyFiles(ctx, ingest.FilesTask{
		Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: time.Now().UTC()}, Files: []ingest.File{mustFile(t, body)}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(t, `SELECT count(*) FROM ingest_replayed_files`) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the main's API takes the replayed files")
	r = e.post(t, "/raw_data_files/", fileBody(st.ID, "filter/replayed.fits"))
	require.Equal(t, http.StatusConflict, r.Status, "a replayed path is learnt: %s", r.Body)
	require.Contains(t, r.detail(t), replayed)

	// The trigger lists only the inserts of connections naming an origin site (seen inside the
	// inserting transaction, before the API could take them).
	for _, origin := range []string{"", "observatory"} {
		tx, err := e.db.Begin()
		require.NoError(t, err)
		if origin != "" {
			_, err = tx.Exec(`SELECT set_config('obsops.origin_site', $1, true)`, origin)
			require.NoError(t, err)
		}
		id := ingest.NewID()
		_, err = tx.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
VALUES ($1, $2, 11, $3, 1, 'sha256:'||repeat('ab', 32))`, id, st.ID, "filter/trigger-"+id)
		require.NoError(t, err)
		var n int
		require.NoError(t, tx.QueryRow(`SELECT count(*) FROM ingest_replayed_files WHERE file_id = $1`, id).Scan(&n))
		require.NoError(t, tx.Rollback())
		require.Equal(t, map[bool]int{false: 0, true: 1}[origin != ""], n, "origin %q", origin)
	}
}

// mustFile decodes a file registration as the API does.
func mustFile(t *testing.T, body string) ingest.File {
	t.Helper()
	f, err := ingest.DecodeFile([]byte(body), "body")
	require.NoError(t, err)
	return f
}
