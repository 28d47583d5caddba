package ingest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

// TestDeadLettersOverTheAPI: admins list, retry and drop the buffer's dead letters through the
// gateway (the work of `ingest admin dead-letters`); viewers and API tokens are refused; an id
// that is no dead letter is a 404 problem.
func TestDeadLettersOverTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	admin, viewer := e.s.JWT(t, "root", "admin"), e.s.JWT(t, "bob", "viewer")
	c := asynq.NewClientFromRedisClient(e.s.Redis.Client())
	info, err := c.Enqueue(asynq.NewTask("ingest:bogus", []byte(`{"tx":"t-1"}`)), asynq.Queue(ingest.Queue), asynq.MaxRetry(0))
	require.NoError(t, err)

	type page struct {
		Items []struct {
			TaskID string `json:"task_id"`
			Type   string `json:"type"`
			Error  string `json:"error"`
		} `json:"items"`
		Total int `json:"total"`
	}
	list := func() page {
		r := e.do(t, http.MethodGet, "/api/ingest/dead-letters", admin, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var p page
		r.json(t, &p)
		return p
	}
	require.Eventually(t, func() bool { return list().Total == 1 }, 20*time.Second, 50*time.Millisecond, "the unknown task is dead-lettered")
	p := list()
	require.Equal(t, info.ID, p.Items[0].TaskID)
	require.NotEmpty(t, p.Items[0].Error)

	for _, bearer := range []string{viewer, e.token} {
		require.Equal(t, http.StatusForbidden, e.do(t, http.MethodGet, "/api/ingest/dead-letters", bearer, nil).Status)
		require.Equal(t, http.StatusForbidden, e.do(t, http.MethodDelete, "/api/ingest/dead-letters/"+info.ID, bearer, nil).Status)
		require.Equal(t, http.StatusForbidden, e.do(t, http.MethodPost, "/api/ingest/dead-letters/"+info.ID+"/retry", bearer, nil).Status)
	}
	require.Equal(t, http.StatusUnauthorized, e.do(t, http.MethodGet, "/api/ingest/dead-letters", "", nil).Status)
	r := e.do(t, http.MethodPost, "/api/ingest/dead-letters/nope/retry", admin, nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Contains(t, r.Header.Get("Content-Type"), "problem+json")

	r = e.do(t, http.MethodPost, "/api/ingest/dead-letters/"+info.ID+"/retry", admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"requeued"`)
	// it can never apply: dead again, then dropped for good
	require.Eventually(t, func() bool { return list().Total == 1 }, 20*time.Second, 50*time.Millisecond)
	r = e.do(t, http.MethodDelete, "/api/ingest/dead-letters/"+info.ID, admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"dropped"`)
	require.Zero(t, list().Total)
	require.Equal(t, http.StatusNotFound, e.do(t, http.MethodDelete, "/api/ingest/dead-letters/"+info.ID, admin, nil).Status)
	require.Contains(t, e.s.Procs["ingest"].Output(), "audit: dead letter dropped")
}
