package ingest_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// env is the suite behind the gateway with a planned obs unit and an instrument's service token.
type env struct {
	s       *testenv.Suite
	db      *sql.DB
	c       *http.Client
	token   string // service account: write:observations, write:data, read:data, read:observations
	obsUnit int64
	module  int64
}

// newEnv starts authtoken, ingest (-role all), site and the gateway (catalog and transfer are not
// needed: the catalog's rows are inserted directly).
func newEnv(t *testing.T, extra map[string]string) *env {
	t.Helper()
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"}
	for k, v := range extra {
		vars[k] = v
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: []string{"transfer", "catalog"}})
	return envFor(t, s)
}

// envFor seeds a planned obs unit and creates the instrument's service token in suite s.
func envFor(t *testing.T, s *testenv.Suite) *env {
	t.Helper()
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	e := &env{s: s, db: db, c: &http.Client{Timeout: 30 * time.Second}, module: 11}
	e.obsUnit = seedObsUnit(t, db, "P1")
	e.token = s.Admin(t, "create-service-token", "--account", "instrument", "--scopes",
		"write:observations,write:data,read:data,read:observations", "--name", "tests", "--days", "30",
		"--kind", "instrument", "--instruments", "1,2,3")
	return e
}

// seedObsUnit inserts a program with one obs unit (as the catalog would) and returns its id. The
// program is olivia's (its PI, decisions §33): the observer the tests change programs as.
func seedObsUnit(t *testing.T, db *sql.DB, program string) int64 {
	t.Helper()
	var src, prog, ou int64
	require.NoError(t, db.QueryRow(`INSERT INTO sources (name, kind, ra_deg, dec_deg) VALUES ($1, 'fixed', 10, -20) RETURNING id`, "src-"+program).Scan(&src))
	require.NoError(t, db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi, pi_username, created_by) VALUES ($1, 't', 'pi', 'olivia', 'olivia') RETURNING id`, program).Scan(&prog))
	require.NoError(t, db.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, 'u1', $2, 11, 600) RETURNING id`, prog, src).Scan(&ou))
	return ou
}

// response is an HTTP answer read in full.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// locations lists the errors[].location of a problem answer.
func (r response) locations(t *testing.T) []string {
	t.Helper()
	var p struct {
		Errors []struct {
			Location string `json:"location"`
		} `json:"errors"`
	}
	r.json(t, &p)
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Location)
	}
	return out
}

func (e *env) do(t *testing.T, method, path, bearer string, body any, headers ...string) response {
	t.Helper()
	return doURL(t, e.c, method, e.s.GatewayURL+path, bearer, body, headers...)
}

func doURL(t testing.TB, c *http.Client, method, url, bearer string, body any, headers ...string) response {
	t.Helper()
	req := testenv.Request(t, method, url, bearer, body)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r := testenv.Do(t, c, req)
	return response{Status: r.Status, Header: r.Header, Body: r.Body}
}

// answer is a buffered write's 201 body.
type answer struct {
	ID            string   `json:"id"`
	IDs           []string `json:"ids"`
	Count         int      `json:"count"`
	TransactionID string   `json:"transaction_id"`
	Status        string   `json:"status"`
}

func (e *env) start(t *testing.T, body map[string]any) answer {
	t.Helper()
	r := e.do(t, http.MethodPost, "/executed_obs_units/start", e.token, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a answer
	r.json(t, &a)
	return a
}

func startBody(obsUnit int64) map[string]any {
	return map[string]any{"obs_unit_id": obsUnit, "instrument_module_id": 11, "start_time": "2026-11-25T01:00:00Z", "meta": map[string]any{"scan": 1}}
}

func fileBody(eou string, path string) map[string]any {
	return map[string]any{"executed_obs_unit_id": eou, "instrument_module_id": 11, "path": path, "size_bytes": 1234,
		"checksum": "sha256:" + strings.Repeat("ab", 32)}
}

// waitCommitted polls a receipt until its transaction is committed.
func (e *env) waitCommitted(t *testing.T, tx string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		r := e.do(t, http.MethodGet, "/api/ingest/transactions/"+tx, e.token, nil)
		if r.Status == http.StatusOK {
			var rc struct {
				State string `json:"state"`
			}
			r.json(t, &rc)
			if rc.State == "committed" {
				return
			}
		}
		last = fmt.Sprintf("%d %s", r.Status, r.Body)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("transaction %s not committed after 30 s: %s", tx, last)
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRow(query, args...).Scan(&n))
	return n
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }
