package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Response is an HTTP answer read in full, so suites can assert on status, headers and body
// without closing bodies themselves.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test (showing the body) when it is not that JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Do sends req with c and reads the whole answer.
func Do(t testing.TB, c *http.Client, req *http.Request) Response {
	t.Helper()
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Request builds method url: body nil (none), a string or []byte (sent as is) or any other value
// (sent as JSON), with Content-Type application/json when there is a body, and bearer as the
// Authorization credential when not empty.
func Request(t testing.TB, method, url, bearer string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return req
}

// Call sends Request(method, url, bearer, body) with c and reads the whole answer.
func Call(t testing.TB, c *http.Client, method, url, bearer string, body any) Response {
	t.Helper()
	return Do(t, c, Request(t, method, url, bearer, body))
}
