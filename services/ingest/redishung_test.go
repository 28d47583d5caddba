package ingest_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// hungAnswers sends n requests per client from clients clients while Redis is paused and
// returns their latencies and statuses.
func hungAnswers(t *testing.T, e *env, clients, n int, req func(i int) (string, string, string, any)) ([]time.Duration, map[int]int, map[int]http.Header) {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	statuses, headers := map[int]int{}, map[int]http.Header{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				method, path, bearer, body := req(c*n + i)
				req := testenv.Request(t, method, e.s.GatewayURL+path, bearer, body)
				start := time.Now()
				r := response{} // status 0: no answer (never allowed); no t.Fatal off the test's goroutine
				if resp, err := e.c.Do(req); err == nil {
					drain(resp.Body)
					_ = resp.Body.Close()
					r = response{Status: resp.StatusCode, Header: resp.Header}
				}
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				statuses[r.Status]++
				headers[r.Status] = r.Header
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, statuses, headers
}

// TestFaultRedisHung: with Redis hung (SIGSTOP: connections accepted, nothing answered) a
// buffered write answers 503 with Retry-After within its bounds — OPS_TOKEN_VERIFY_TIMEOUT for
// the token, then OPS_INGEST_REDIS_TIMEOUT for the hold, 1 s each by default — never 201 and
// never the 10–20 s it took while go-redis ignored the callers' deadlines; with authtoken hung
// as well, token verification gives up after OPS_TOKEN_VERIFY_TIMEOUT alone. With Redis refusing
// connections (killed), writes and token-verified reads answer at once (≤ 0.3 s).
func TestFaultRedisHung(t *testing.T) {
	const verify, hold, margin = time.Second, time.Second, 300 * time.Millisecond // the defaults
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	r := e.do(t, http.MethodPost, "/raw_data_files/", e.token, fileBody(eou, "hung/warm"))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var warm answer
	r.json(t, &warm)
	write := func(prefix string) func(i int) (string, string, string, any) {
		return func(i int) (string, string, string, any) {
			return http.MethodPost, "/raw_data_files/", e.token, fileBody(eou, fmt.Sprintf("%s/%d", prefix, i))
		}
	}
	requireBounded := func(what string, lat []time.Duration, st map[int]int, hd map[int]http.Header, bound time.Duration, ok ...int) {
		t.Helper()
		p99 := lat[len(lat)*99/100]
		t.Logf("%s: answers %v, p50 %v, p99 %v (bound %v)", what, st, lat[len(lat)/2], p99, bound)
		for status := range st {
			require.Contains(t, append(ok, http.StatusServiceUnavailable), status, "%s: status %d", what, status)
		}
		if st[http.StatusServiceUnavailable] > 0 {
			require.NotEmpty(t, hd[http.StatusServiceUnavailable].Get("Retry-After"), "%s: a 503 says when to retry", what)
		}
		require.LessOrEqual(t, p99, bound, "%s: p99 beyond its bound", what)
	}

	e.s.Redis.Pause()
	lat, st, hd := hungAnswers(t, e, 4, 5, write("hung"))
	requireBounded("buffered writes, Redis hung", lat, st, hd, verify+hold+margin)

	authtoken := e.s.Procs["authtoken"]
	authtoken.Signal(syscall.SIGSTOP)
	lat, st, hd = hungAnswers(t, e, 4, 5, write("hung2"))
	authtoken.Signal(syscall.SIGCONT)
	requireBounded("buffered writes, Redis and authtoken hung", lat, st, hd, verify+margin)
	e.s.Redis.Resume()
	require.Eventually(t, func() bool {
		return e.do(t, http.MethodPost, "/raw_data_files/", e.token, fileBody(eou, "hung/after")).Status == http.StatusCreated
	}, 15*time.Second, 100*time.Millisecond, "writes are acknowledged again once Redis answers")

	e.s.Redis.Kill()
	lat, st, hd = hungAnswers(t, e, 4, 5, write("refused"))
	requireBounded("buffered writes, Redis refusing", lat, st, hd, margin)
	lat, st, hd = hungAnswers(t, e, 4, 5, func(int) (string, string, string, any) {
		return http.MethodGet, "/raw_data_files/" + warm.ID, e.token, nil
	})
	requireBounded("token-verified reads, Redis refusing", lat, st, hd, margin, http.StatusOK)
	e.s.Redis.Start()
}

// TestGatewayIngestUnreachable: with the ingest service killed (its port refuses connections),
// the real gateway answers its routes — a buffered write with its body, a read — 503 with
// Retry-After at once, never 502: the README's clients retry 503 with the same Idempotency-Key.
func TestGatewayIngestUnreachable(t *testing.T) {
	e := newEnv(t, nil)
	eou := e.start(t, startBody(e.obsUnit)).ID
	p := e.s.Procs["ingest"]
	p.Signal(syscall.SIGKILL)
	exited, _ := p.Wait(10 * time.Second)
	require.True(t, exited)
	for _, q := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/raw_data_files/", fileBody(eou, "unreachable/1")},
		{http.MethodPost, "/raw_data_files/bulk", map[string]any{"files": []any{fileBody(eou, "unreachable/2"), fileBody(eou, "unreachable/3")}}},
		{http.MethodGet, "/executed_obs_units/" + fmt.Sprint(e.obsUnit), nil},
	} {
		start := time.Now()
		r := e.do(t, q.method, q.path, e.token, q.body, "Idempotency-Key", "k-"+q.path)
		took := time.Since(start)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s %s: %s", q.method, q.path, r.Body)
		require.NotEmpty(t, r.Header.Get("Retry-After"), "%s %s: a client knows when to retry", q.method, q.path)
		require.Contains(t, r.Header.Get("Content-Type"), "problem+json")
		require.Less(t, took, time.Second, "%s %s", q.method, q.path)
		t.Logf("%s %s: %d after %v", q.method, q.path, r.Status, took)
	}
}
