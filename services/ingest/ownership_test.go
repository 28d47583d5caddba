package ingest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInstrumentsOwnTheirRecords (issue 24, point 3): an instrument account's token starts and
// finishes executions, registers and updates files and creates and finalizes packages only of
// the instrument modules it is bound to; another instrument's records are a 403 problem naming
// the field, with nothing written. Packages are created and finalized by an instrument or an
// admin, never a viewer or an observer. Accounts of another kind, or without a kind, write nothing.
func TestInstrumentsOwnTheirRecords(t *testing.T) {
	e := newEnv(t, nil)
	// A: Prime-Cam's 280 GHz module alone; B: CHAI as a whole (modules 31, 32).
	tokA := e.s.Admin(t, "create-service-token", "--account", "primecam-280", "--scopes", "write:observations,write:data,read:data",
		"--kind", "instrument", "--modules", "11")
	tokB := e.s.Admin(t, "create-service-token", "--account", "chai", "--scopes", "write:observations,write:data,read:data",
		"--kind", "instrument", "--instruments", "3")
	weather := e.s.Admin(t, "create-service-token", "--account", "weather", "--scopes", "write:observations,write:data",
		"--kind", "weather")
	legacy := e.s.Admin(t, "create-service-token", "--account", "old-daq", "--scopes", "write:observations,write:data")
	var chaiUnit int64
	require.NoError(t, e.db.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s)
		SELECT program_id, 'chai', source_id, 31, 600 FROM obs_units WHERE id = $1 RETURNING id`, e.obsUnit).Scan(&chaiUnit))

	forbidden := func(r response, field string) {
		t.Helper()
		require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
		require.Contains(t, r.Header.Get("Content-Type"), "application/problem+json")
		require.Contains(t, string(r.Body), "urn:obsops:problem:forbidden")
		require.Contains(t, string(r.Body), field)
	}
	created := func(r response) answer {
		t.Helper()
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var a answer
		r.json(t, &a)
		return a
	}

	// Starts: on one's own modules only; an instrument names its module.
	forbidden(e.do(t, "POST", "/executed_obs_units/start", tokB, startBody(e.obsUnit)), "body.instrument_module_id")
	noModule := startBody(e.obsUnit)
	delete(noModule, "instrument_module_id")
	forbidden(e.do(t, "POST", "/executed_obs_units/start", tokA, noModule), "body.instrument_module_id")
	for _, other := range []string{weather, legacy} {
		forbidden(e.do(t, "POST", "/executed_obs_units/start", other, startBody(e.obsUnit)), "body.instrument_module_id")
	}
	execA := created(e.do(t, "POST", "/executed_obs_units/start", tokA, startBody(e.obsUnit)))
	chaiStart := startBody(chaiUnit)
	chaiStart["instrument_module_id"] = 32
	execB := created(e.do(t, "POST", "/executed_obs_units/start", tokB, chaiStart))

	// Files: one's own module; a bulk with one foreign file is refused whole, naming it.
	forbidden(e.do(t, "POST", "/raw_data_files/", tokB, fileBody(execA.ID, "b-on-a.fits")), "body.instrument_module_id")
	chaiFile := fileBody(execB.ID, "chai-1.fits")
	chaiFile["instrument_module_id"] = 32
	forbidden(e.do(t, "POST", "/raw_data_files/bulk", tokB, map[string]any{"files": []any{chaiFile, fileBody(execA.ID, "sneaky.fits")}}),
		"body.files[1].instrument_module_id")
	fileA := created(e.do(t, "POST", "/raw_data_files/", tokA, fileBody(execA.ID, "a-1.fits")))
	created(e.do(t, "POST", "/raw_data_files/bulk", tokB, map[string]any{"files": []any{chaiFile}}))

	// Finish and file update while A's records are still buffered, then once committed.
	finish := map[string]any{"end_time": "2026-11-25T02:00:00Z"}
	forbidden(e.do(t, "PUT", "/executed_obs_units/"+execA.ID+"/finish", tokB, finish), "path.id")
	forbidden(e.do(t, "PUT", "/raw_data_files/"+fileA.ID, tokB, map[string]any{"size_bytes": 1}), "path.id")
	e.waitCommitted(t, execA.TransactionID)
	e.waitCommitted(t, fileA.TransactionID)
	forbidden(e.do(t, "PUT", "/executed_obs_units/"+execA.ID+"/finish", tokB, finish), "path.id")
	forbidden(e.do(t, "PUT", "/raw_data_files/"+fileA.ID, tokB, map[string]any{"size_bytes": 1}), "path.id")
	r := e.do(t, "PUT", "/raw_data_files/"+fileA.ID, tokA, map[string]any{"meta": map[string]any{"ok": true}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	created(e.do(t, "PUT", "/executed_obs_units/"+execA.ID+"/finish", tokA, finish))

	// Packages: an instrument's own, or an admin's; never a viewer's or an observer's.
	admin := e.s.JWT(t, "ops-admin", "admin")
	viewer := e.s.JWT(t, "bob", "viewer")
	observer := e.s.JWT(t, "olive", "observer")
	tr := e.do(t, "POST", "/api/tokens/", viewer, map[string]any{"name": "w", "scopes": []string{"write:data"}, "expires_in_days": 1})
	require.Equal(t, http.StatusCreated, tr.Status, "%s", tr.Body)
	var vt struct {
		Token string `json:"token"`
	}
	tr.json(t, &vt)
	pkg := map[string]any{"executed_obs_unit_id": execA.ID, "instrument_module_id": 11, "name": "pkg-a", "file_ids": []string{fileA.ID}}
	for name, cred := range map[string]string{"viewer JWT": viewer, "observer JWT": observer, "viewer's write:data token": vt.Token} {
		r := e.do(t, "POST", "/raw_data_package/", cred, pkg)
		require.Equal(t, http.StatusForbidden, r.Status, "%s: %s", name, r.Body)
	}
	forbidden(e.do(t, "POST", "/raw_data_package/", tokB, pkg), "body.instrument_module_id")
	pkgA := created(e.do(t, "POST", "/raw_data_package/", tokA, pkg))
	adminPkg := created(e.do(t, "POST", "/raw_data_package/", admin, map[string]any{"executed_obs_unit_id": execA.ID, "instrument_module_id": 11, "name": "pkg-admin"}))

	fin := map[string]any{"size_bytes": 1234, "checksum": "sha256:" + strings.Repeat("cd", 32)}
	forbidden(e.do(t, "PUT", "/raw_data_package/"+pkgA.ID+"/finalize", tokB, fin), "path.id") // still buffered
	e.waitCommitted(t, pkgA.TransactionID)
	forbidden(e.do(t, "PUT", "/raw_data_package/"+pkgA.ID+"/finalize", tokB, fin), "path.id") // committed
	withFiles := map[string]any{"size_bytes": 1234, "checksum": "sha256:" + strings.Repeat("cd", 32), "file_ids": []string{fileA.ID}}
	forbidden(e.do(t, "PUT", "/raw_data_package/"+pkgA.ID+"/finalize", tokB, withFiles), "path.id")
	for name, cred := range map[string]string{"viewer JWT": viewer, "observer JWT": observer} {
		r := e.do(t, "PUT", "/raw_data_package/"+pkgA.ID+"/finalize", cred, fin)
		require.Equal(t, http.StatusForbidden, r.Status, "%s: %s", name, r.Body)
	}
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM raw_data_packages WHERE status = 'complete'`), "no refused finalize wrote")
	r = e.do(t, "PUT", "/raw_data_package/"+pkgA.ID+"/finalize", tokA, fin)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.do(t, "PUT", "/raw_data_package/"+adminPkg.ID+"/finalize", admin, map[string]any{"size_bytes": 0, "checksum": "sha256:" + strings.Repeat("ef", 32)})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// Nothing refused was written: A's module has A's file only, no finish by B changed A's run.
	e.waitCommitted(t, execB.TransactionID)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_files WHERE instrument_module_id = 11`))
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path IN ('b-on-a.fits', 'sneaky.fits')`))
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM raw_data_files WHERE size_bytes = 1`))
}
