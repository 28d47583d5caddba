package authtoken_test

import (
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// restartAuthtoken stops the suite's authtoken (if running), adds extra to the suite's
// environment (so later admin commands see it too) and starts authtoken again on the same
// address, waiting until it is ready.
func restartAuthtoken(t *testing.T, s *testenv.Suite, extra map[string]string) {
	t.Helper()
	if p, ok := s.Procs["authtoken"]; ok {
		_ = p.Stop(10 * time.Second)
	}
	for k, v := range extra {
		s.Env[k] = v
	}
	p := testenv.Start(t, "authtoken", testenv.Binary(t, "authtoken"), s.Env)
	testenv.WaitReady(t, p, s.URLs["authtoken"]+"/readyz", 30*time.Second)
	s.Procs["authtoken"] = p
}

// noRedirects is an HTTP client that shows redirects instead of following them.
func noRedirects() *http.Client {
	return &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// browser is a client that keeps cookies like a browser and shows redirects instead of
// following them.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := noRedirects()
	c.Jar = jar
	return c
}

// response is an HTTP answer read in full.
type response = testenv.Response

// get sends GET url with an optional bearer credential.
func get(t *testing.T, c *http.Client, url, bearer string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return do(t, c, req)
}

// do sends req with c and reads the whole answer.
func do(t *testing.T, c *http.Client, req *http.Request) response {
	t.Helper()
	return testenv.Do(t, c, req)
}

// problemDetail is the detail of a problem+json answer.
func problemDetail(t *testing.T, r response) string {
	t.Helper()
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"), "content type %q, body %s", r.Header.Get("Content-Type"), r.Body)
	var p struct {
		Detail string `json:"detail"`
	}
	r.JSON(t, &p)
	return p.Detail
}
