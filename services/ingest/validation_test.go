package ingest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

// TestWritesRefuseInvalidInput checks that every invalid field of every write is a 422 naming
// the field, and that nothing is buffered for it.
func TestWritesRefuseInvalidInput(t *testing.T) {
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	hex64 := strings.Repeat("0", 64)
	with := func(base map[string]any, k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range base {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	file := fileBody(eou, "a/b.fits")
	start := startBody(e.obsUnit)
	pkg := map[string]any{"executed_obs_unit_id": eou, "instrument_module_id": 11, "name": "p"}
	cases := []struct {
		name, method, path string
		body               any
		loc                string
	}{
		{"start: missing obs unit", "POST", "/executed_obs_units/start", with(start, "obs_unit_id", nil), "body.obs_unit_id"},
		{"start: obs unit not an integer", "POST", "/executed_obs_units/start", with(start, "obs_unit_id", "x"), "body.obs_unit_id"},
		{"start: unknown obs unit", "POST", "/executed_obs_units/start", with(start, "obs_unit_id", 987654), "body.obs_unit_id"},
		{"start: unknown module", "POST", "/executed_obs_units/start", with(start, "instrument_module_id", 99), "body.instrument_module_id"},
		// obs unit planned for module 11 (Prime-Cam): module 31 is CHAI's
		{"start: module of another instrument", "POST", "/executed_obs_units/start", with(start, "instrument_module_id", 31), "body.instrument_module_id"},
		{"start: bad time", "POST", "/executed_obs_units/start", with(start, "start_time", "yesterday"), "body.start_time"},
		{"start: bad id", "POST", "/executed_obs_units/start", with(start, "id", "nope"), "body.id"},
		{"start: meta not an object", "POST", "/executed_obs_units/start", with(start, "meta", []int{1}), "body.meta"},
		// What PostgreSQL cannot store is refused at acknowledgement, never dead-lettered later.
		{"start: meta with a NUL character", "POST", "/executed_obs_units/start", with(start, "meta", map[string]any{"note": "a\x00b"}), "body.meta"},
		{"start: meta with a number beyond numeric", "POST", "/executed_obs_units/start", `{"obs_unit_id":` + strconv.FormatInt(e.obsUnit, 10) + `,"instrument_module_id":11,"start_time":"2026-11-25T01:00:00Z","meta":{"x":1e200000}}`, "body.meta"},
		{"start: site with a NUL character", "POST", "/executed_obs_units/start", with(start, "site", "main\x00"), "body.site"},
		{"start: unknown field", "POST", "/executed_obs_units/start", with(start, "colour", "red"), "body.colour"},
		{"start: not JSON", "POST", "/executed_obs_units/start", "{", "body"},
		{"start: empty body", "POST", "/executed_obs_units/start", "", "body"},
		{"finish: bad status", "PUT", "/executed_obs_units/" + eou + "/finish", map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "great"}, "body.status"},
		{"finish: missing end", "PUT", "/executed_obs_units/" + eou + "/finish", map[string]any{}, "body.end_time"},
		{"finish: ends before it starts", "PUT", "/executed_obs_units/" + eou + "/finish", map[string]any{"end_time": "2026-11-25T00:59:59Z"}, "body.end_time"},
		{"finish: bad id", "PUT", "/executed_obs_units/x/finish", map[string]any{"end_time": "2026-11-25T02:00:00Z"}, "path.id"},
		{"file: absolute path", "POST", "/raw_data_files/", with(file, "path", "/etc/passwd"), "body.path"},
		{"file: meta with a NUL character", "POST", "/raw_data_files/", with(file, "meta", map[string]any{"k\x00": 1}), "body.meta"},
		{"file: dot-dot path", "POST", "/raw_data_files/", with(file, "path", "a/../b"), "body.path"},
		{"file: long path", "POST", "/raw_data_files/", with(file, "path", strings.Repeat("a", 1025)), "body.path"},
		{"file: negative size", "POST", "/raw_data_files/", with(file, "size_bytes", -1), "body.size_bytes"},
		{"file: fractional size", "POST", "/raw_data_files/", with(file, "size_bytes", 1.5), "body.size_bytes"},
		{"file: md5 checksum", "POST", "/raw_data_files/", with(file, "checksum", "md5:"+hex64[:32]), "body.checksum"},
		{"file: short sha256", "POST", "/raw_data_files/", with(file, "checksum", "sha256:abc"), "body.checksum"},
		{"file: unknown execution", "POST", "/raw_data_files/", with(file, "executed_obs_unit_id", ingest.NewID()), "body.executed_obs_unit_id"},
		{"file: unknown module", "POST", "/raw_data_files/", with(file, "instrument_module_id", 12345), "body.instrument_module_id"},
		{"file: unknown package", "POST", "/raw_data_files/", with(file, "raw_data_package_id", ingest.NewID()), "body.raw_data_package_id"},
		{"file: bad created_at", "POST", "/raw_data_files/", with(file, "created_at", "2026-13-01T00:00:00Z"), "body.created_at"},
		{"bulk: empty", "POST", "/raw_data_files/bulk", map[string]any{"files": []any{}}, "body.files"},
		{"bulk: missing", "POST", "/raw_data_files/bulk", map[string]any{}, "body.files"},
		{"bulk: second file bad", "POST", "/raw_data_files/bulk", map[string]any{"files": []any{file, with(file, "path", "a//b")}}, "body.files[1].path"},
		{"bulk: unknown field in third", "POST", "/raw_data_files/bulk", map[string]any{"files": []any{file, file, with(file, "x", 1)}}, "body.files[2].x"},
		{"package: no name", "POST", "/raw_data_package/", with(pkg, "name", nil), "body.name"},
		{"package: name with a NUL character", "POST", "/raw_data_package/", with(pkg, "name", "p\x00"), "body.name"},
		{"package: unknown file", "POST", "/raw_data_package/", with(pkg, "file_ids", []string{ingest.NewID()}), "body.file_ids[0]"},
		{"package: unknown execution", "POST", "/raw_data_package/", with(pkg, "executed_obs_unit_id", ingest.NewID()), "body.executed_obs_unit_id"},
		{"finalize: bad checksum", "PUT", "/raw_data_package/" + ingest.NewID() + "/finalize", map[string]any{"size_bytes": 1, "checksum": "sha256:xyz"}, "body.checksum"},
		{"update: nothing", "PUT", "/raw_data_files/" + ingest.NewID(), map[string]any{}, "body"},
		{"receipt: bad id", "GET", "/api/ingest/transactions/nope", nil, "path.transaction_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, e.token, c.body)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
			require.Contains(t, r.locations(t), c.loc, "%s", r.Body)
		})
	}
	// Another module of the planned instrument is allowed (12 is Prime-Cam's too).
	e.start(t, with(start, "instrument_module_id", 12))
	// Nothing but the valid starts were held: once the queue is drained, the database has them alone.
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM executed_obs_units`) == 2 &&
			e.s.Redis.Client().LLen(t.Context(), "asynq:{ingest}:pending").Val() == 0
	}, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files`))
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_packages`))
}

// TestIdempotencyKey: same key and body → the original answer, replayed; another body → 409; a
// client-chosen id makes a retry without a key safe as well.
func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	body := fileBody(eou, "x/1.fits")
	first := e.do(t, "POST", "/raw_data_files/", e.token, body, "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	require.Empty(t, first.Header.Get("Idempotency-Replayed"))
	again := e.do(t, "POST", "/raw_data_files/", e.token, body, "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotency-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	other := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "x/2.fits"), "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusConflict, other.Status, "%s", other.Body)

	// Client-chosen id, no key: the retry answers the original transaction; other content 409.
	// (Another path: x/1.fits is registered, and a path is unique per instrument module.)
	id := ingest.NewID()
	body = fileBody(eou, "x/3.fits")
	body["id"] = id
	a := e.do(t, "POST", "/raw_data_files/", e.token, body)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	b := e.do(t, "POST", "/raw_data_files/", e.token, body)
	require.Equal(t, http.StatusCreated, b.Status, "%s", b.Body)
	var aa, bb answer
	a.json(t, &aa)
	b.json(t, &bb)
	require.Equal(t, aa.ID, bb.ID)
	if bb.TransactionID != aa.TransactionID {
		// The worker committed the first write between the two requests: then the database
		// answers the retry (same content: accepted, as a transaction that applies as a no-op).
		e.waitCommitted(t, aa.TransactionID)
	} else {
		require.Equal(t, aa, bb)
	}
	body["size_bytes"] = 7
	c := e.do(t, "POST", "/raw_data_files/", e.token, body)
	require.Equal(t, http.StatusConflict, c.Status, "%s", c.Body)

	// After the commit (buffer entry gone) the database decides: same content accepted, other 409.
	e.waitCommitted(t, aa.TransactionID)
	body["size_bytes"] = 1234
	d := e.do(t, "POST", "/raw_data_files/", e.token, body)
	require.Equal(t, http.StatusCreated, d.Status, "%s", d.Body)
	body["size_bytes"] = 8
	d = e.do(t, "POST", "/raw_data_files/", e.token, body)
	require.Equal(t, http.StatusConflict, d.Status, "%s", d.Body)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM raw_data_files WHERE id = $1`, id))
}

// TestAccessRules: the service-account-only routes refuse JWTs and tokens of other users; a
// token without the write scope is refused on writes; receipts need a read scope.
func TestAccessRules(t *testing.T) {
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	admin := e.s.JWT(t, "ops-admin", "admin")
	viewer := e.s.JWT(t, "bob", "viewer")
	mkToken := func(jwt string, scopes ...string) string {
		r := e.do(t, "POST", "/api/tokens/", jwt, map[string]any{"name": "t", "scopes": scopes, "expires_in_days": 1})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var tk struct {
			Token string `json:"token"`
		}
		r.json(t, &tk)
		return tk.Token
	}
	viewerWriter := mkToken(viewer, "write:data", "write:observations", "read:data")
	viewerReader := mkToken(viewer, "read:data")
	viewerNoRead := mkToken(viewer, "read:sources")

	for _, w := range []struct{ method, path string }{
		{"POST", "/executed_obs_units/start"}, {"PUT", "/executed_obs_units/" + eou + "/finish"},
		{"POST", "/raw_data_files/"}, {"POST", "/raw_data_files/bulk"}, {"PUT", "/raw_data_files/" + ingest.NewID()},
	} {
		for name, cred := range map[string]string{"admin JWT": admin, "viewer JWT": viewer, "viewer's token with write scopes": viewerWriter} {
			r := e.do(t, w.method, w.path, cred, map[string]any{})
			require.Equal(t, http.StatusForbidden, r.Status, "%s %s with %s: %s", w.method, w.path, name, r.Body)
		}
		r := e.do(t, w.method, w.path, "", map[string]any{})
		require.Equal(t, http.StatusUnauthorized, r.Status)
	}
	// Package create admits instrument accounts' write:data tokens and admins (ownership_test.go); a read-only token is refused.
	r := e.do(t, "POST", "/raw_data_package/", viewerReader, map[string]any{"executed_obs_unit_id": eou, "instrument_module_id": 11, "name": "p"})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "insufficient_scope")
	// Reads: a read:data token reads files; receipts want read:data or read:observations.
	fr := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "a.fits"))
	var a answer
	fr.json(t, &a)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/raw_data_files/"+a.ID, viewerReader, nil).Status)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/raw_data_files/"+a.ID, viewer, nil).Status)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/api/ingest/transactions/"+a.TransactionID, viewerReader, nil).Status)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/api/ingest/transactions/"+a.TransactionID, viewer, nil).Status)
	r = e.do(t, "GET", "/api/ingest/transactions/"+a.TransactionID, viewerNoRead, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusForbidden, e.do(t, "GET", "/raw_data_files/"+a.ID, viewerNoRead, nil).Status)
}

// TestBulkLimits: 10,000 files fit (body over 1 MiB, through the gateway), 10,001 are refused
// naming body.files, and a body beyond the bulk limit gets 413; other routes keep the 1 MiB limit.
func TestBulkLimits(t *testing.T) {
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	files := make([]any, ingest.MaxBulkFiles+1)
	for i := range files {
		files[i] = fileBody(eou, fmt.Sprintf("night/scan-%05d/detector-array-%03d/raw-%06d.fits", i/100, i%100, i))
	}
	big, err := json.Marshal(map[string]any{"files": files[:ingest.MaxBulkFiles]})
	require.NoError(t, err)
	require.Greater(t, len(big), 1<<20, "the test body must exceed the default 1 MiB limit")
	r := e.do(t, "POST", "/raw_data_files/bulk", e.token, big)
	require.Equal(t, http.StatusCreated, r.Status, "%.500s", r.Body)
	var a answer
	r.json(t, &a)
	require.Equal(t, ingest.MaxBulkFiles, a.Count)
	e.waitCommitted(t, a.TransactionID)
	require.Equal(t, ingest.MaxBulkFiles, e.count(t, `SELECT count(*) FROM raw_data_files WHERE tx = $1`, a.TransactionID))

	r = e.do(t, "POST", "/raw_data_files/bulk", e.token, map[string]any{"files": files})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%.500s", r.Body)
	require.Contains(t, r.locations(t), "body.files")

	huge := `{"files":[` + strings.Repeat(`{"path":"`+strings.Repeat("x", 1000)+`"},`, 17000) + `{}]}`
	r = e.do(t, "POST", "/raw_data_files/bulk", e.token, huge)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%.300s", r.Body)
	// A single registration keeps the default limit.
	r = e.do(t, "POST", "/raw_data_files/", e.token, `{"meta":{"x":"`+strings.Repeat("x", 2<<20)+`"}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%.300s", r.Body)
	_ = strconv.Itoa
}

// TestReceiptShape: a receipt has every field of its documented shape in every state — null
// where there is nothing to say (last_error, and committed_at and commit_lsn until the commit)
// and [] rather than an absent record list — so clients can read it without guessing.
func TestReceiptShape(t *testing.T) {
	e := newEnv(t, nil)
	a := e.start(t, startBody(e.obsUnit))
	fields := []string{"transaction_id", "state", "attempts", "last_error", "committed_at", "commit_lsn", "kind", "record_ids"}
	read := func() map[string]any {
		r := e.do(t, http.MethodGet, "/api/ingest/transactions/"+a.TransactionID, e.token, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var m map[string]any
		r.json(t, &m)
		for _, f := range fields {
			require.Contains(t, m, f, "receipt %s", r.Body)
		}
		require.Nil(t, m["last_error"], "nothing failed: %s", r.Body)
		require.IsType(t, []any{}, m["record_ids"], "%s", r.Body)
		return m
	}
	first := read()
	if first["state"] != "committed" {
		require.Nil(t, first["committed_at"])
		require.Nil(t, first["commit_lsn"])
	}
	e.waitCommitted(t, a.TransactionID)
	done := read()
	require.NotNil(t, done["committed_at"])
	require.Equal(t, []any{a.ID}, done["record_ids"])
}
