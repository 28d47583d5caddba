package service_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

// problemBody is a problem as a client sees it, with presence of each member checked.
type problemBody map[string]any

// RequireProblem checks the one error shape: problem+json with type (from the vocabulary),
// title, status, detail, instance, and the X-Request-Id header. It returns the problem.
func requireProblem(t *testing.T, resp *http.Response, status int, kind problem.Kind) problem.Problem {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, resp.StatusCode, "%s", b)
	require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"), "%s", b)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "X-Request-Id on a %d", status)
	var raw problemBody
	require.NoError(t, json.Unmarshal(b, &raw), "%s", b)
	for _, member := range []string{"type", "title", "status", "detail", "instance"} {
		require.Contains(t, raw, member, "%s", b)
		require.NotEmpty(t, raw[member], "%s in %s", member, b)
	}
	var p problem.Problem
	require.NoError(t, json.Unmarshal(b, &p))
	require.Equal(t, status, p.Status)
	require.Equal(t, kind.Type(), p.Type, "%s", b)
	require.Equal(t, kind.Title(), p.Title)
	return p
}

func TestErrorsAreProblems(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	cases := []struct {
		name, method, path, body string
		kind                     problem.Kind
		detail                   string
	}{
		{"unknown route", "GET", "/nope", "", problem.NotFound, "no route for GET /nope"},
		{"wrong method", "DELETE", "/healthz", "", problem.MethodNotAllowed, "method DELETE is not allowed"},
		{"oversize body", "POST", "/echo", `{"name":"` + strings.Repeat("x", 5000) + `"}`, problem.PayloadTooLarge, "exceeds the limit of 4096 bytes"},
		{"malformed json", "POST", "/echo", `{"name":`, problem.BadRequest, ""},
		{"invalid field", "POST", "/echo", `{"name":""}`, problem.Invalid, "body.name"},
		{"unknown field", "POST", "/echo", `{"name":"a","extra":1}`, problem.Invalid, "body.extra"},
		{"invalid path parameter", "GET", "/things/0", "", problem.Invalid, "path.id"},
		{"handler's huma 404", "GET", "/things/2", "", problem.NotFound, "thing 2 not found"},
		{"handler's problem", "GET", "/things/3", "", problem.Conflict, "thing 3 is busy"},
		{"handler's plain error", "GET", "/things/4", "", problem.Internal, "internal error"},
		{"handler's huma 500", "GET", "/things/5", "", problem.Internal, "internal error"},
		{"huma handler panics", "GET", "/things/6", "", problem.Internal, "internal error"},
		{"fiber handler's plain error", "GET", "/plain-error", "", problem.Internal, "internal error"},
		{"fiber handler panics", "GET", "/plain-panic", "", problem.Internal, "internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			p := requireProblem(t, resp, tc.kind.Status(), tc.kind)
			require.Contains(t, p.Detail, tc.detail)
			require.Equal(t, tc.path, p.Instance)
			for _, secret := range []string{"10.1.2.3", "10.9.8.7", "pq:", "password", "boom"} {
				require.NotContains(t, p.Detail, secret, "internal text never reaches the client")
			}
			if tc.kind == problem.Invalid {
				require.NotEmpty(t, p.Errors)
				require.Contains(t, tc.detail, p.Errors[0].Location[:4], "errors[].location names the field")
			}
			if tc.kind == problem.Conflict {
				require.Equal(t, "7", resp.Header.Get("Retry-After"), "a problem's headers are sent")
			}
		})
	}
}

// TestMalformedRequestsAreNotEchoed sends what the HTTP parser rejects, each carrying a bearer
// token, as raw bytes: the answer is a short problem+json 4xx with a request id that quotes
// nothing of the request.
func TestMalformedRequestsAreNotEchoed(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	addr := strings.TrimPrefix(base, "http://")
	const secret = "ops_api_token_SECRETsecretSECRETsecretSECRETsecret1234"
	cases := []struct {
		name, raw string
		status    int
	}{
		{"bad header line", "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret + "\r\nno colon here " + secret + "\r\n\r\n", 400},
		{"bad request line", "GET\x01/" + secret + " HTTP/1.1 extra\r\nAuthorization: Bearer " + secret + "\r\n\r\n", 400},
		{"no whitespace in request line", "GET/" + secret + "\r\nAuthorization: Bearer " + secret + "\r\n\r\n", 400},
		{"headers too large", "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret + "\r\nX-Big: " + strings.Repeat(secret, 300) + "\r\n\r\n", 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = conn.Write([]byte(tc.raw))
			require.NoError(t, err)
			raw, _ := io.ReadAll(conn) // the server closes the connection after its answer
			require.NotContains(t, string(raw), "SECRET", "the request is never echoed")
			require.NotContains(t, string(raw), "Bearer")
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil)
			require.NoError(t, err, "%q", raw)
			defer resp.Body.Close()
			kind := problem.BadRequest
			if tc.status == 431 {
				kind = problem.HeadersTooLarge
			}
			p := requireProblem(t, resp, tc.status, kind)
			require.Equal(t, "urn:obsops:request:"+resp.Header.Get("X-Request-Id"), p.Instance)
			require.Less(t, len(raw), 1024, "short")
		})
	}
}

// TestHeadAnswersLikeGet: HEAD works on huma GET operations and plain Fiber GET routes: the
// status and headers of GET, no body.
func TestHeadAnswersLikeGet(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	for _, path := range []string{"/things/1", "/things/2", "/healthz", "/readyz", "/openapi.json", "/metrics"} {
		get, err := http.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(get.Body)
		get.Body.Close()
		resp, err := http.Head(base + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, get.StatusCode, resp.StatusCode, path)
		require.Empty(t, b, path)
		require.Equal(t, get.Header.Get("Content-Type"), resp.Header.Get("Content-Type"), path)
		if path != "/metrics" && path != "/readyz" { // their bodies vary from call to call
			require.Equal(t, int64(len(body)), resp.ContentLength, path)
		}
		require.NotEmpty(t, resp.Header.Get("X-Request-Id"), path)
	}
}
