package ingest_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 23, rule 5: reads never contradict receipts.

// deadRecord is what the reads say of a record's write.
type deadRecord struct {
	ID           string  `json:"id"`
	BufferStatus string  `json:"buffer_status"`
	LastError    *string `json:"last_error"`
}

// TestDeadLettersReadDead: writes that became dead letters (an obs unit and an instrument module
// deleted behind the worker's back, in the database) read as buffer_status "dead" with the
// receipt's last_error on every read route that shows buffered records — the executions of an
// obs unit, a file, a package and its files — and records whose writes committed read
// committed with last_error null.
func TestDeadLettersReadDead(t *testing.T) {
	e := newSplitEnv(t) // no worker yet: everything stays buffered
	ou := seedObsUnit(t, e.db, "DEAD")
	_, err := e.db.Exec(`INSERT INTO instrument_modules (id, instrument_id, name) SELECT 900, instrument_id, 'doomed' FROM instrument_modules WHERE id = 11`)
	require.NoError(t, err)

	st := e.start(t, startBody(ou))
	fb := fileBody(st.ID, "dead/a.fits")
	fb["instrument_module_id"] = 900
	r := e.do(t, http.MethodPost, "/raw_data_files/", e.token, fb)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var file answer
	r.json(t, &file)
	r = e.do(t, http.MethodPost, "/raw_data_package/", e.token, map[string]any{"executed_obs_unit_id": st.ID, "instrument_module_id": 900,
		"name": "dead-pkg", "file_ids": []string{file.ID}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var pkg answer
	r.json(t, &pkg)
	live := e.start(t, startBody(e.obsUnit)) // one that applies

	// Reads before: buffered, last_error null.
	var f deadRecord
	e.do(t, http.MethodGet, "/raw_data_files/"+file.ID, e.token, nil).json(t, &f)
	require.Equal(t, "buffered", f.BufferStatus)
	require.Nil(t, f.LastError)

	// The operator deletes rows in the database directly (not through the catalog): these
	// writes can never apply.
	_, err = e.db.Exec(`DELETE FROM observing_programs WHERE short_name = 'DEAD'`)
	require.NoError(t, err)
	_, err = e.db.Exec(`DELETE FROM instrument_modules WHERE id = 900`)
	require.NoError(t, err)
	ingestProc(t, e.s, "worker", nil)
	e.waitCommitted(t, live.TransactionID)
	lastErrs := map[string]string{}
	for _, tx := range []string{st.TransactionID, file.TransactionID, pkg.TransactionID} {
		require.Eventually(t, func() bool {
			s, _, _ := e.receipt(t, tx)
			return s == "dead"
		}, 30*time.Second, 50*time.Millisecond, "transaction %s", tx)
		_, _, lastErrs[tx] = e.receipt(t, tx)
		require.Contains(t, lastErrs[tx], "23503")
	}
	requireDead := func(what string, rec deadRecord, tx string) {
		t.Helper()
		require.Equal(t, "dead", rec.BufferStatus, "%s", what)
		require.NotNil(t, rec.LastError, "%s", what)
		require.Equal(t, lastErrs[tx], *rec.LastError, "%s: the read says what the receipt says", what)
	}

	// GET /executed_obs_units/{obs_unit_id}: the dead start.
	var execs struct {
		Items []deadRecord `json:"items"`
	}
	r = e.do(t, http.MethodGet, "/executed_obs_units/"+strconv.FormatInt(ou, 10), e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.json(t, &execs)
	require.Len(t, execs.Items, 1)
	requireDead("execution", execs.Items[0], st.TransactionID)

	// GET /raw_data_files/{id}.
	f = deadRecord{}
	e.do(t, http.MethodGet, "/raw_data_files/"+file.ID, e.token, nil).json(t, &f)
	requireDead("file", f, file.TransactionID)

	// GET /raw_data_package/{id}: the package and its file.
	var view struct {
		deadRecord
		Files struct {
			Items []deadRecord `json:"items"`
		} `json:"files"`
	}
	r = e.do(t, http.MethodGet, "/raw_data_package/"+pkg.ID, e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.json(t, &view)
	requireDead("package", view.deadRecord, pkg.TransactionID)
	require.Len(t, view.Files.Items, 1)
	requireDead("package file", view.Files.Items[0], file.TransactionID)

	// The applied start reads committed, last_error null.
	execs.Items = nil
	e.do(t, http.MethodGet, "/executed_obs_units/"+strconv.FormatInt(e.obsUnit, 10), e.token, nil).json(t, &execs)
	require.Len(t, execs.Items, 1)
	require.Equal(t, "committed", execs.Items[0].BufferStatus)
	require.Nil(t, execs.Items[0].LastError)
	require.Contains(t, string(e.do(t, http.MethodGet, "/executed_obs_units/"+strconv.FormatInt(e.obsUnit, 10), e.token, nil).Body), `"last_error":null`)
}
