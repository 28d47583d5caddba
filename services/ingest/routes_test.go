package ingest_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

// TestObservationLifecycle is an instrument's night through the gateway: start, files (single
// and bulk), a package naming some files, finish, reads at every step (buffered at once, then
// committed), finalize (idempotent, immutable afterwards).
func TestObservationLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ouPath := "/executed_obs_units/" + strconv.FormatInt(e.obsUnit, 10)

	st := e.start(t, startBody(e.obsUnit))
	require.Equal(t, "buffered", st.Status)
	require.NotEmpty(t, st.TransactionID)

	// Read-your-writes: the execution is listed at once.
	r := e.do(t, http.MethodGet, ouPath, e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list struct {
		Items []ingest.ExecutedObsUnit `json:"items"`
		Total int                      `json:"total"`
	}
	r.json(t, &list)
	require.Equal(t, 1, list.Total)
	require.Equal(t, st.ID, list.Items[0].ID)
	require.Equal(t, "running", list.Items[0].Status)

	// One file, then a bulk of three.
	r = e.do(t, http.MethodPost, "/raw_data_files/", e.token, fileBody(st.ID, "raw/scan1/a.fits"))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var one answer
	r.json(t, &one)
	require.Equal(t, "/raw_data_files/"+one.ID, r.Header.Get("Location"))
	r = e.do(t, http.MethodGet, "/raw_data_files/"+one.ID, e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var f ingest.RawDataFile
	r.json(t, &f)
	require.Equal(t, "raw/scan1/a.fits", f.Path)

	bulk := map[string]any{"files": []any{fileBody(st.ID, "raw/scan1/b.fits"), fileBody(st.ID, "raw/scan1/c.fits"), fileBody(st.ID, "raw/scan1/d.fits")}}
	r = e.do(t, http.MethodPost, "/raw_data_files/bulk", e.token, bulk)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var many answer
	r.json(t, &many)
	require.Equal(t, 3, many.Count)
	require.Len(t, many.IDs, 3)

	// A package naming two files (one single, one of the bulk).
	r = e.do(t, http.MethodPost, "/raw_data_package/", e.token, map[string]any{"executed_obs_unit_id": st.ID, "instrument_module_id": 11,
		"name": "scan1-280", "file_ids": []string{one.ID, many.IDs[0]}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var pkg answer
	r.json(t, &pkg)
	r = e.do(t, http.MethodGet, "/raw_data_package/"+pkg.ID, e.token, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var view struct {
		ingest.RawDataPackage
		Files struct {
			Items []ingest.RawDataFile `json:"items"`
			Total int                  `json:"total"`
		} `json:"files"`
	}
	r.json(t, &view)
	require.Equal(t, "building", view.Status)
	require.Equal(t, 2, view.Files.Total, "%s", r.Body)

	// Finish.
	r = e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T01:10:00Z", "meta": map[string]any{"ok": true}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var fin answer
	r.json(t, &fin)
	r = e.do(t, http.MethodGet, ouPath, e.token, nil)
	r.json(t, &list)
	require.Equal(t, "completed", list.Items[0].Status)

	// Everything reaches the database.
	for _, tx := range []string{st.TransactionID, one.TransactionID, many.TransactionID, pkg.TransactionID, fin.TransactionID} {
		e.waitCommitted(t, tx)
	}
	require.Equal(t, 4, e.count(t, `SELECT count(*) FROM raw_data_files WHERE executed_obs_unit_id = $1`, st.ID))
	r = e.do(t, http.MethodGet, ouPath, e.token, nil)
	r.json(t, &list)
	require.Equal(t, "committed", list.Items[0].BufferStatus)
	require.Equal(t, "completed", list.Items[0].Status)
	require.JSONEq(t, `{"scan":1,"ok":true}`, string(list.Items[0].Meta))
	r = e.do(t, http.MethodGet, "/raw_data_package/"+pkg.ID, e.token, nil)
	r.json(t, &view)
	require.Equal(t, "committed", view.BufferStatus)
	require.Equal(t, 2, view.Files.Total, "%s", r.Body)

	// Finalize: complete is final.
	fz := map[string]any{"size_bytes": 99, "checksum": "xxh64:0123456789abcdef"}
	r = e.do(t, http.MethodPut, "/raw_data_package/"+pkg.ID+"/finalize", e.token, fz)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"status":"complete"`)
	r = e.do(t, http.MethodPut, "/raw_data_package/"+pkg.ID+"/finalize", e.token, fz)
	require.Equal(t, http.StatusOK, r.Status, "same finalize again is a no-op: %s", r.Body)
	r = e.do(t, http.MethodPut, "/raw_data_package/"+pkg.ID+"/finalize", e.token, map[string]any{"size_bytes": 100, "checksum": "xxh64:0123456789abcdef"})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	// No file can join it, and its files cannot change.
	fb := fileBody(st.ID, "raw/late.fits")
	fb["raw_data_package_id"] = pkg.ID
	r = e.do(t, http.MethodPost, "/raw_data_files/", e.token, fb)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	r = e.do(t, http.MethodPut, "/raw_data_files/"+one.ID, e.token, map[string]any{"size_bytes": 1})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	r = e.do(t, http.MethodPut, "/raw_data_files/"+many.IDs[2], e.token, map[string]any{"size_bytes": 1, "meta": map[string]any{"x": 1}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"size_bytes":1`)

	// Unknown records.
	unknown := ingest.NewID()
	for _, p := range []string{"/raw_data_files/" + unknown, "/raw_data_package/" + unknown, "/executed_obs_units/999999"} {
		r = e.do(t, http.MethodGet, p, e.token, nil)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", p, r.Body)
	}
	r = e.do(t, http.MethodPut, "/executed_obs_units/"+unknown+"/finish", e.token, map[string]any{"end_time": "2026-11-25T01:10:00Z"})
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	r = e.do(t, http.MethodPut, "/raw_data_package/"+unknown+"/finalize", e.token, fz)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	r = e.do(t, http.MethodPut, "/raw_data_files/"+unknown, e.token, map[string]any{"size_bytes": 1})
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	r = e.do(t, http.MethodGet, "/api/ingest/transactions/"+unknown, e.token, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"))
}

// TestBufferingDisabled: with OPS_BUFFERING_ENABLED=false the critical writes go straight to
// PostgreSQL: the row exists when the 201 arrives, which says committed, as does the receipt.
func TestBufferingDisabled(t *testing.T) {
	e := newEnv(t, map[string]string{"OPS_BUFFERING_ENABLED": "false"})
	st := e.start(t, startBody(e.obsUnit))
	require.Equal(t, "committed", st.Status)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM executed_obs_units WHERE id = $1`, st.ID))
	r := e.do(t, http.MethodPost, "/raw_data_files/bulk", e.token, map[string]any{"files": []any{fileBody(st.ID, "d/1"), fileBody(st.ID, "d/2")}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a answer
	r.json(t, &a)
	require.Equal(t, "committed", a.Status)
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM raw_data_files WHERE executed_obs_unit_id = $1`, st.ID))
	rc := e.do(t, http.MethodGet, "/api/ingest/transactions/"+a.TransactionID, e.token, nil)
	require.Equal(t, http.StatusOK, rc.Status, "%s", rc.Body)
	require.Contains(t, string(rc.Body), `"state":"committed"`)
	r = e.do(t, http.MethodGet, "/raw_data_files/"+a.IDs[0], e.token, nil)
	require.Contains(t, string(r.Body), `"buffer_status":"committed"`)
}
