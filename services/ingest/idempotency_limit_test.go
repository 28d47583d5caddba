package ingest_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIdempotencyKeysBoundedPerCredential: an account holding OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL
// unexpired keys gets 429 (the limit named, Retry-After until its oldest key expires) for a new
// key and nothing is recorded, while its held keys still replay, it may still write without a
// key, and another account's keyed writes are still accepted.
func TestIdempotencyKeysBoundedPerCredential(t *testing.T) {
	e := newEnv(t, map[string]string{"OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL": "3"})
	other := e.s.Admin(t, "create-service-token", "--account", "instrument-b", "--scopes",
		"write:observations,write:data,read:data,read:observations", "--name", "tests-b", "--days", "30",
		"--kind", "instrument", "--instruments", "1,2,3")
	eou := e.start(t, startBody(e.obsUnit)).ID

	for i := range 3 {
		r := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "a/"+strconv.Itoa(i)), "Idempotency-Key", "a-"+strconv.Itoa(i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	full := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "a/full"), "Idempotency-Key", "a-full")
	require.Equal(t, http.StatusTooManyRequests, full.Status, "%s", full.Body)
	require.Equal(t, "application/problem+json", full.Header.Get("Content-Type"))
	require.Contains(t, string(full.Body), `"type":"urn:obsops:problem:rate_limited"`)
	require.Contains(t, string(full.Body), "OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL")
	require.Contains(t, string(full.Body), "holds 3 unexpired")
	retry, err := strconv.Atoi(full.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", full.Header.Get("Retry-After"))
	require.Greater(t, retry, 3600, "the oldest key lives OPS_INGEST_IDEMPOTENCY_TTL (24 h)")

	// A held key still replays; without a key the account still writes.
	again := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "a/0"), "Idempotency-Key", "a-0")
	require.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotency-Replayed"))
	plain := e.do(t, "POST", "/raw_data_files/", e.token, fileBody(eou, "a/plain"))
	require.Equal(t, http.StatusCreated, plain.Status, "%s", plain.Body)

	// Another account is not starved.
	for i := range 3 {
		r := e.do(t, "POST", "/raw_data_files/", other, fileBody(eou, "b/"+strconv.Itoa(i)), "Idempotency-Key", "b-"+strconv.Itoa(i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}

	// The refused write left nothing: only the accepted ones reach the database.
	waitDrained(t, e)
	require.Zero(t, e.count(t, `SELECT count(*) FROM raw_data_files WHERE path = 'a/full'`))
	require.Equal(t, 7, e.count(t, `SELECT count(*) FROM raw_data_files`))
}
