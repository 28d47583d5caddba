package gateway_test

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver, to break the database under a service
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/gateway"
)

// shapeCase is one error provoked the same way directly at a service and through the gateway.
type shapeCase struct {
	name    string
	service string // where to send it directly; "" only through the gateway
	method  string
	path    string
	body    string
	auth    string // Authorization header
	kind    problem.Kind
}

// TestErrorShapeEverywhere: every error status, whoever answers it (the router, the chassis'
// server, huma's validation, authentication, the gateway itself), is problem+json with type,
// title, status, detail, instance and X-Request-Id, directly at a service and through the
// gateway.
func TestErrorShapeEverywhere(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{
		Skip: []string{"transfer"}, // its URL points at a port nobody listens on: 503
		Env:  map[string]string{"OPS_BODY_LIMIT_BYTES": "4096", "OPS_AUTH_FAILURE_LIMIT": "10"},
	})
	viewer := "Bearer " + s.JWT(t, "shape-viewer", "viewer")
	big := `{"name":"` + strings.Repeat("x", 5000) + `"}`
	cases := []shapeCase{
		{"no credential", "authtoken", "GET", "/api/tokens/", "", "", problem.Unauthenticated},
		{"invalid credential", "authtoken", "GET", "/api/tokens/", "", "Bearer not-a-jwt", problem.Unauthenticated},
		{"not an admin", "authtoken", "GET", "/api/tokens/audit", "", viewer, problem.Forbidden},
		{"unknown route", "site", "GET", "/api/site/nope", "", "", problem.NotFound},
		{"unknown object", "authtoken", "GET", "/api/tokens/987654", "", viewer, problem.NotFound},
		{"wrong method", "site", "DELETE", "/api/site/info", "", "", problem.MethodNotAllowed},
		{"oversize body", "authtoken", "POST", "/api/tokens/", big, viewer, problem.PayloadTooLarge},
		{"malformed JSON", "authtoken", "POST", "/api/tokens/", `{"name":`, viewer, problem.BadRequest},
		{"invalid field", "authtoken", "POST", "/api/tokens/", `{"name":"x","scopes":["read:nothing"]}`, viewer, problem.Invalid},
		{"gateway: unknown route", "", "GET", "/nowhere", "", "", problem.NotFound},
		{"gateway: internal path", "", "GET", "/internal/tokens/verify", "", "", problem.NotFound},
		{"gateway: wrong method", "", "DELETE", "/openapi.json", "", "", problem.MethodNotAllowed},
		{"gateway: service unreachable", "", "GET", "/api/transfer/overview", "", "", problem.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bases := map[string]string{"gateway": s.GatewayURL}
			if tc.service != "" {
				bases[tc.service] = s.URLs[tc.service]
			}
			for via, base := range bases {
				resp, body := send(t, tc.method, base+tc.path, tc.body, tc.auth)
				p := requireShape(t, via, resp, body, tc.kind)
				if tc.kind == problem.Invalid {
					require.NotEmpty(t, p.Errors, via)
					require.Equal(t, "body.scopes[0]", p.Errors[0].Location, "%s: the field is named", via)
					require.Contains(t, p.Detail, "body.scopes[0]", via)
				}
				if tc.kind == problem.MethodNotAllowed {
					require.NotEmpty(t, resp.Header.Get("Allow"), via)
				}
			}
		})
	}

	t.Run("malformed request bytes are never echoed", func(t *testing.T) {
		for _, base := range []string{s.GatewayURL, s.URLs["authtoken"], s.URLs["site"]} {
			raw := rawExchange(t, base, "GET /api/site/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ops_api_token_SECRETSECRET\r\nbroken header line SECRETSECRET\r\n\r\n")
			require.NotContains(t, raw, "SECRET", base)
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
			require.NoError(t, err, "%q", raw)
			body, _ := io.ReadAll(resp.Body)
			requireShape(t, base, resp, body, problem.BadRequest)
		}
	})

	t.Run("rate limited by the gateway", func(t *testing.T) {
		limited, _ := startGateway(t, s, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "2"})
		var resp *http.Response
		var body []byte
		for range 10 {
			if resp, body = send(t, "GET", limited+"/api/site/info", "", ""); resp.StatusCode == 429 {
				break
			}
		}
		requireShape(t, "gateway", resp, body, problem.RateLimited)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	})
	t.Run("failed-credential budget", func(t *testing.T) {
		for via, base := range map[string]string{"authtoken": s.URLs["authtoken"], "gateway": s.GatewayURL} {
			var resp *http.Response
			var body []byte
			for i := range 50 {
				if resp, body = send(t, "GET", base+"/api/tokens/", "", "Bearer junk-"+strconv.Itoa(i)); resp.StatusCode == 429 {
					break
				}
			}
			requireShape(t, via, resp, body, problem.TooManyFailedAttempts)
			require.NotEmpty(t, resp.Header.Get("Retry-After"), via)
		}
	})

	t.Run("internal error", func(t *testing.T) {
		db, err := sql.Open("postgres", s.DatabaseURL)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(`DROP TABLE token_audit, api_tokens CASCADE`) // the handler's query fails
		require.NoError(t, err)
		for via, base := range map[string]string{"authtoken": s.URLs["authtoken"], "gateway": s.GatewayURL} {
			resp, body := send(t, "GET", base+"/api/tokens/", "", viewer)
			requireShape(t, via, resp, body, problem.Internal)
			require.NotContains(t, string(body), "api_tokens", "%s: the cause is only logged", via)
			require.NotContains(t, string(body), "relation", via)
		}
	})

	t.Run("unavailable dependency", func(t *testing.T) { // last: it kills Redis
		s.Redis.Kill() // /buffer-stats reads the queue from Redis
		for via, base := range map[string]string{"gateway": s.GatewayURL, "site": s.URLs["site"]} {
			resp, body := send(t, "GET", base+"/buffer-stats", "", "")
			requireShape(t, via, resp, body, problem.Unavailable)
			require.NotContains(t, string(body), s.Redis.Addr, "%s: no internal address", via)
		}
	})
}

// TestHeadOnEveryGetRoute: HEAD answers wherever GET does, with GET's status and headers and no
// body, for every GET operation in every service's OpenAPI document, directly and through the
// gateway (as anonymous and as an admin), and for the gateway's own routes.
func TestHeadOnEveryGetRoute(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	admin := "Bearer " + s.JWT(t, "head-admin", "admin")
	param := regexp.MustCompile(`\{[^}]+\}`)
	checked := 0
	for _, name := range testenv.SuiteServices() {
		if name == "gateway" {
			continue
		}
		_, doc := send(t, "GET", s.URLs[name]+"/openapi.json", "", "")
		var d struct {
			Paths map[string]map[string]json.RawMessage `json:"paths"`
		}
		require.NoError(t, json.Unmarshal(doc, &d), name)
		paths := []string{"/openapi.json"}
		for p, ops := range d.Paths {
			if _, ok := ops["get"]; ok {
				paths = append(paths, param.ReplaceAllString(p, "1"))
			}
		}
		sort.Strings(paths)
		for _, p := range paths {
			targets := map[string]string{name: s.URLs[name]}
			if gateway.Routed(name, p) {
				targets["gateway"] = s.GatewayURL
			}
			for via, base := range targets {
				for _, auth := range []string{"", admin} {
					get, getBody := send(t, "GET", base+p, "", auth)
					head, headBody := send(t, "HEAD", base+p, "", auth)
					what := via + " " + p
					require.Equal(t, get.StatusCode, head.StatusCode, what)
					require.NotEqual(t, http.StatusMethodNotAllowed, head.StatusCode, what)
					require.Empty(t, headBody, what)
					require.Equal(t, get.Header.Get("Content-Type"), head.Header.Get("Content-Type"), what)
					require.NotEmpty(t, head.Header.Get("X-Request-Id"), what)
					if p == "/openapi.json" || p == "/api/site/info" || p == "/.well-known/jwks.json" { // stable bodies
						require.Equal(t, int64(len(getBody)), head.ContentLength, what)
					}
					checked++
				}
			}
		}
	}
	for _, p := range []string{"/openapi.json", "/docs", "/docs/index.html"} {
		get, _ := send(t, "GET", s.GatewayURL+p, "", "")
		head, headBody := send(t, "HEAD", s.GatewayURL+p, "", "")
		require.Equal(t, get.StatusCode, head.StatusCode, p)
		require.Empty(t, headBody, p)
	}
	require.Greater(t, checked, 20, "the documents list the suite's GET routes")
}

func send(t *testing.T, method, url, body, auth string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// requireShape checks the one error shape and the kind.
func requireShape(t *testing.T, via string, resp *http.Response, body []byte, kind problem.Kind) problem.Problem {
	t.Helper()
	require.Equal(t, kind.Status(), resp.StatusCode, "%s: %s", via, body)
	require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"), via)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "%s: X-Request-Id", via)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(body, &raw), "%s: %s", via, body)
	for _, m := range []string{"type", "title", "status", "detail", "instance"} {
		require.NotEmpty(t, raw[m], "%s: %s missing in %s", via, m, body)
	}
	var p problem.Problem
	require.NoError(t, json.NewDecoder(bytes.NewReader(body)).Decode(&p))
	require.Equal(t, kind.Type(), p.Type, "%s: %s", via, body)
	return p
}

// rawExchange writes raw to the server at base and returns everything it answers before closing.
func rawExchange(t *testing.T, base, raw string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write([]byte(raw))
	require.NoError(t, err)
	b, _ := io.ReadAll(conn)
	return string(b)
}

// TestWriteAtMainSiteDocumented: at a secondary site every change authtoken, catalog and site
// would make in the main database answers 409 write_at_main_site (decisions §45), so every
// operation of theirs that changes something lists 409 in its OpenAPI document. The exceptions
// change nothing there.
func TestWriteAtMainSiteDocumented(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"gateway", "transfer", "ingest"}})
	changesNothing := map[string]string{
		"POST /sources/resolve":         "resolves names: a read",
		"POST /visibility/precalculate": "reads the sources and queues a job in Redis: the route changes nothing in the database",
	}
	checked, seen := 0, map[string]bool{}
	for _, name := range []string{"authtoken", "catalog", "site"} {
		_, doc := send(t, "GET", s.URLs[name]+"/openapi.json", "", "")
		var d struct {
			Paths map[string]map[string]struct {
				Responses map[string]json.RawMessage `json:"responses"`
			} `json:"paths"`
		}
		require.NoError(t, json.Unmarshal(doc, &d), name)
		for path, ops := range d.Paths {
			for method, op := range ops {
				if method == "get" || method == "head" {
					continue
				}
				what := strings.ToUpper(method) + " " + path
				if _, ok := changesNothing[what]; ok {
					seen[what] = true
					continue
				}
				_, listed := op.Responses["409"]
				require.True(t, listed, "%s (%s) does not list 409: at a secondary site it answers write_at_main_site", what, name)
				checked++
			}
		}
	}
	require.Greater(t, checked, 10)
	for what := range changesNothing {
		require.True(t, seen[what], "%s is listed as an exception but not documented: drop it from the list", what)
	}
}
