package catalog_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// env is a running suite (authtoken, catalog, ingest — which the catalog asks before deleting obs
// units —, gateway) with a session JWT per role.
type env struct {
	s                       *testenv.Suite
	c                       *http.Client
	db                      *sql.DB
	admin, observer, viewer string
}

func startEnv(t *testing.T, extra map[string]string) *env {
	t.Helper()
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: extra, Skip: []string{"transfer", "site"}})
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &env{s: s, c: &http.Client{Timeout: 30 * time.Second}, db: db,
		admin: s.JWT(t, "ada", "admin"), observer: s.JWT(t, "oscar", "observer"), viewer: s.JWT(t, "vera", "viewer")}
}

// response is an HTTP answer read in full.
type response = testenv.Response

// problem is a problem+json answer.
type problem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// requireProblem checks a problem+json answer with status and, when location is set, an error
// naming that location; it returns the problem.
func requireProblem(t *testing.T, r response, status int, location string) problem {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"), "content type %q", r.Header.Get("Content-Type"))
	var p problem
	r.JSON(t, &p)
	if location != "" {
		var locs []string
		for _, e := range p.Errors {
			locs = append(locs, e.Location)
		}
		require.Contains(t, locs, location, "problem: %s", r.Body)
	}
	return p
}

// call sends method url with an optional JSON body and bearer credential.
func (e *env) call(t *testing.T, method, url, bearer string, body any) response {
	t.Helper()
	return testenv.Call(t, e.c, method, url, bearer, body)
}

// gw is a URL through the gateway; svc one at the catalog service itself.
func (e *env) gw(path string) string  { return e.s.GatewayURL + path }
func (e *env) svc(path string) string { return e.s.URLs["catalog"] + path }

// apiToken creates an API token of user (with the session JWT) carrying scopes.
func (e *env) apiToken(t *testing.T, session string, scopes ...string) string {
	t.Helper()
	r := e.call(t, http.MethodPost, e.gw("/api/tokens/"), session, map[string]any{"name": "catalog test " + strings.Join(scopes, ","), "scopes": scopes, "expires_in_days": 1})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var tok struct {
		Token string `json:"token"`
	}
	r.JSON(t, &tok)
	return tok.Token
}

// catalogAdmin runs `catalog admin ARGS...` with the suite's environment.
func (e *env) catalogAdmin(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "catalog"), append([]string{"admin"}, args...)...)
	for k, v := range e.s.Env {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s", k, v))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "catalog admin %v: %s", args, stderr.String())
	return strings.TrimSpace(stdout.String())
}

// createSource posts a source as the observer and returns its id.
func (e *env) createSource(t *testing.T, body any) int64 {
	t.Helper()
	r := e.call(t, http.MethodPost, e.gw("/sources/"), e.observer, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var src struct {
		ID int64 `json:"id"`
	}
	r.JSON(t, &src)
	return src.ID
}
