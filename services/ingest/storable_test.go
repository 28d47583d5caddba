package ingest

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"testing"

	_ "github.com/lib/pq" // PostgreSQL driver: the real database judges what the validator accepts
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// FuzzMetaStorable feeds meta values to the validator and what it accepts to the real
// PostgreSQL as JSONB: whatever is acknowledged must be storable (an acknowledged write refused
// by the database later would become a dead letter). A well-formed object the validator refuses
// must be refused by PostgreSQL too, so the check is no stricter than the database. The seeds
// run in every `make test`; `go test -fuzz FuzzMetaStorable` explores further.
func FuzzMetaStorable(f *testing.F) {
	for _, seed := range []string{
		`{"a":"ok"}`, `{"a":"\u0000"}`, `{"\u0000":1}`, `{"a":"x\\u0000"}`, `{"a":["b",{"c":"\u0000"}]}`,
		`{"a":1e131071}`, `{"a":1e131072}`, `{"a":1.5e131070}`, `{"a":12345e131068}`, `{"a":12345e131067}`,
		`{"a":1e-16383}`, `{"a":1e-16384}`, `{"a":-0.5e-16382}`, `{"a":0e999999999999}`, `{"a":0e1000000000}`, `{"a":0e-16384}`, `{"a":1.000e-16381}`, `{"a":1.000e-16380}`,
		`{"a":1000e131068}`, `{"a":1000e131069}`, `{"a":0.001e131074}`, `{"a":0.001e131075}`, `{"a":1E+5}`,
		`{"a":123456789012345678901234567890}`, `{"a":"\ud800"}`, `{"a":"\udc00x"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\u0041"}`, `{"a":"é"}`, "{\"a\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	db, err := sql.Open("postgres", testenv.Database(f))
	require.NoError(f, err)
	f.Cleanup(func() { db.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		var e errs
		meta := checkMeta(&e, "body.meta", raw)
		var stored bool
		var dbErr error
		if e.err() == nil {
			dbErr = db.QueryRow(`SELECT $1::jsonb IS NOT NULL`, string(meta)).Scan(&stored)
			require.NoError(t, dbErr, "acknowledged meta %q is refused by PostgreSQL", raw)
			return
		}
		trimmed := bytes.TrimSpace(raw)
		if len(raw) > MaxMetaBytes || !json.Valid(trimmed) || len(trimmed) == 0 || trimmed[0] != '{' {
			return // refused for its shape, not for storability
		}
		dbErr = db.QueryRow(`SELECT $1::jsonb IS NOT NULL`, string(trimmed)).Scan(&stored)
		require.Error(t, dbErr, "meta %q refused (%v) although PostgreSQL stores it", raw, e.err())
	})
}
