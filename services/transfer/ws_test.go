package transfer_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	fws "github.com/fasthttp/websocket"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

type wsMessage struct {
	Type string `json:"type"`
	Seq  int64  `json:"seq"`
	transfer.Overview
}

// wsClient reads overview messages and checks that update seqs strictly increase.
type wsClient struct {
	t    *testing.T
	conn *fws.Conn
	last int64
}

func dialWS(t *testing.T, base, query string, header http.Header) (*wsClient, *http.Response, error) {
	t.Helper()
	conn, resp, err := fws.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/api/transfer/ws/overview"+query, header)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &wsClient{t: t, conn: conn}, resp, nil
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func (c *wsClient) next(timeout time.Duration) wsMessage {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	_, b, err := c.conn.ReadMessage()
	require.NoError(c.t, err)
	var m wsMessage
	require.NoError(c.t, json.Unmarshal(b, &m), "%s", b)
	switch m.Type {
	case "snapshot":
		require.GreaterOrEqual(c.t, m.Seq, c.last)
		c.last = m.Seq
	case "update":
		require.Greater(c.t, m.Seq, c.last, "update seqs strictly increase")
		c.last = m.Seq
	case "heartbeat":
		require.Equal(c.t, c.last, m.Seq)
	default:
		c.t.Fatalf("unknown message type %q", m.Type)
	}
	return m
}

// until reads messages until one satisfies ok.
func (c *wsClient) until(timeout time.Duration, ok func(wsMessage) bool) wsMessage {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		require.Positive(c.t, left, "no matching message in time")
		m := c.next(left)
		if ok(m) {
			return m
		}
	}
}

// Two transfer processes, a client on each: both see an update caused through the other; a
// reconnect with ?since= gets a fresh snapshot; heartbeats; per-user limit; 1001 on shutdown.
func TestOverviewWebSocketAcrossReplicas(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_WS_MAX_PER_USER": "2"})
	a := s.URLs["transfer"]
	envB := map[string]string{}
	for k, v := range s.Env {
		envB[k] = v
	}
	envB["OPS_TRANSFER_ADDR"] = testenv.FreeAddr(t)
	b := "http://" + envB["OPS_TRANSFER_ADDR"]
	procB := testenv.Start(t, "transfer-b", testenv.Binary(t, "transfer"), envB)
	testenv.WaitReady(t, procB, b+"/readyz", 30*time.Second)

	ca, _, err := dialWS(t, a, "", bearer(s.Viewer))
	require.NoError(t, err)
	cb, _, err := dialWS(t, b, "?token="+s.Viewer, nil) // browsers pass the JWT as ?token=
	require.NoError(t, err)
	for _, c := range []*wsClient{ca, cb} {
		m := c.next(5 * time.Second)
		require.Equal(t, "snapshot", m.Type)
		require.NotNil(t, m.Operations)
	}

	// Packages enter (planner at whichever replica leads): both clients see it.
	transfertest.AddPackages(t, s.Kit.DB, 2, 1000, "complete")
	for _, c := range []*wsClient{ca, cb} {
		c.until(10*time.Second, func(m wsMessage) bool {
			return m.Type == "update" && m.Operations[transfer.KindRawDataPackage][transfer.StatusPending] == 2
		})
	}
	// A change caused through B (a mover's claim at B) reaches the clients of both replicas.
	ops := claim(t, b, s.Mover, map[string]any{"kinds": []string{"raw_data_package"}})
	require.Len(t, ops, 1)
	for _, c := range []*wsClient{ca, cb} {
		c.until(10*time.Second, func(m wsMessage) bool {
			return m.Type == "update" && m.Operations[transfer.KindRawDataPackage][transfer.StatusInProgress] == 1
		})
	}
	// And one caused through A.
	ops = claim(t, a, s.Mover, map[string]any{"kinds": []string{"raw_data_package"}})
	require.Len(t, ops, 1)
	for _, c := range []*wsClient{ca, cb} {
		c.until(10*time.Second, func(m wsMessage) bool {
			return m.Type == "update" && m.Operations[transfer.KindRawDataPackage][transfer.StatusInProgress] == 2
		})
	}
	// Heartbeats (OPS_WS_HEARTBEAT=500ms here) carry the last seq.
	ca.until(5*time.Second, func(m wsMessage) bool { return m.Type == "heartbeat" })

	// Reconnect with ?since=SEQ: a fresh snapshot with the current counts.
	since := ca.last
	_ = ca.conn.Close()
	re, _, err := dialWS(t, a, "?since="+itoa(since), bearer(s.Viewer))
	require.NoError(t, err)
	re.last = since
	m := re.next(5 * time.Second)
	require.Equal(t, "snapshot", m.Type)
	require.GreaterOrEqual(t, m.Seq, since)
	require.Equal(t, int64(2), m.Operations[transfer.KindRawDataPackage][transfer.StatusInProgress])

	// Per-user limit (2 here, per replica): a third connection of bob at A is refused. The second
	// is admitted once A has noticed the close of ca (asynchronous: its slot frees a moment later).
	require.Eventually(t, func() bool {
		_, _, err := dialWS(t, a, "", bearer(s.Viewer))
		return err == nil
	}, 5*time.Second, 20*time.Millisecond, "bob's second connection at A")
	_, resp, err := dialWS(t, a, "", bearer(s.Viewer))
	require.ErrorIs(t, err, fws.ErrBadHandshake)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	_, resp, err = dialWS(t, a, "", nil)
	require.ErrorIs(t, err, fws.ErrBadHandshake)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Through the gateway, with another user.
	gwc, _, err := dialWS(t, s.GatewayURL, "?token="+s.AdminJWT, nil)
	require.NoError(t, err)
	require.Equal(t, "snapshot", gwc.next(5*time.Second).Type)

	// Shutdown closes B's sockets with 1001.
	procB.Signal(syscall.SIGTERM)
	_ = cb.conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, _, err := cb.conn.ReadMessage()
		if err != nil {
			require.True(t, fws.IsCloseError(err, fws.CloseGoingAway), "got %v", err)
			break
		}
	}
	exited, _ := procB.Wait(15 * time.Second)
	require.True(t, exited)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
