package transfer_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// stack is the suite (authtoken, transfer, gateway) with the credentials tests use.
type stack struct {
	*testenv.Suite
	Kit      *transfertest.Env // store and planner on the suite's database, in the test process
	AdminJWT string            // JWT of alice (admin)
	Viewer   string            // JWT of bob (viewer)
	Mover    string            // API token of the service account mover (write:data)
}

// startStack starts authtoken, transfer and the gateway with quick pipeline settings plus env.
func startStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	e := map[string]string{
		"OPS_PLANNER_INTERVAL": "100ms", "OPS_DTP_TARGET_BYTES": "3000", "OPS_DTP_MAX_WAIT": "1h",
		"OPS_RETRY_BACKOFF": "100ms", "OPS_RETRY_BACKOFF_MAX": "1s", "OPS_WS_HEARTBEAT": "500ms",
	}
	for k, v := range env {
		e[k] = v
	}
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: e, Skip: []string{"catalog", "ingest", "site"}})
	db, err := database.Open(s.DatabaseURL, 10)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st := &stack{Suite: s, Kit: transfertest.NewOn(t, s.DatabaseURL, s.Redis)}
	st.AdminJWT = s.JWT(t, "alice", "admin")
	st.Viewer = s.JWT(t, "bob", "viewer")
	st.Mover = s.Admin(t, "create-service-token", "--account", "mover", "--scopes", "write:data", "--name", "mover", "--days", "1",
		"--kind", "mover", "--locations", "1,2,3,4,5")
	return st
}

// response is an HTTP answer read in full.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r response) JSON(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

var client = &http.Client{Timeout: 30 * time.Second}

// call sends method url with an optional bearer credential and JSON body.
func call(t *testing.T, method, url, bearer string, body any) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// problem is a problem+json answer.
type problem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
	} `json:"errors"`
}

func problemOf(t *testing.T, r response) problem {
	t.Helper()
	require.Contains(t, r.Header.Get("Content-Type"), "application/problem+json", "body %s", r.Body)
	var p problem
	r.JSON(t, &p)
	return p
}

// pqInts passes ids as a PostgreSQL bigint array.
func pqInts(ids []int64) any { return pq.Array(ids) }
