package live_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fws "github.com/fasthttp/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
	"github.com/obsops/obsops/services/transfer/live"
)

// A client that does not read is dropped; a client that reads gets every update, unslowed.
func TestSlowReaderDroppedOthersUnaffected(t *testing.T) {
	e := transfertest.New(t)
	reg := prometheus.NewRegistry()
	hub := live.NewHub(e.Service, e.RDB, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour, 8, reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/ws", func(c *fiber.Ctx) error {
		c.SetUserContext(authn.WithPrincipal(c.UserContext(), &authn.Principal{Username: c.Query("user")}))
		return c.Next()
	}, hub.Admit, hub.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	defer func() { _ = hub.CloseAll(context.Background()); _ = app.Shutdown() }()
	url := "ws://" + ln.Addr().String() + "/ws?user="

	dial := func(user string) *fws.Conn {
		d := fws.Dialer{ReadBufferSize: 4096}
		c, _, err := d.Dial(url+user, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, b, err := c.ReadMessage()
		require.NoError(t, err)
		require.Contains(t, string(b), `"type":"snapshot"`)
		return c
	}
	slow := dial("slow")
	fast := dial("fast")
	if tc, ok := slow.NetConn().(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096) // keep the kernel from buffering much for the client that never reads
	}

	const n = 2000
	var got atomic.Int64
	var last int64
	done := make(chan error, 1)
	go func() {
		for {
			_ = fast.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, b, err := fast.ReadMessage()
			if err != nil {
				done <- err
				return
			}
			var m struct{ Seq int64 }
			if json.Unmarshal(b, &m) != nil || m.Seq <= last {
				done <- io.ErrUnexpectedEOF
				return
			}
			last = m.Seq
			if got.Add(1) == n {
				done <- nil
				return
			}
		}
	}()
	t0 := time.Now()
	pad := strings.Repeat("x", 16<<10)
	for i := 1; i <= n; i++ {
		b, _ := json.Marshal(map[string]any{"type": "update", "seq": i, "pad": pad})
		require.NoError(t, e.RDB.Publish(ctx, transfer.OverviewChannel, b).Err())
		if i%10 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case err := <-done:
		require.NoError(t, err, "the reading client got %d of %d", got.Load(), n)
	case <-time.After(60 * time.Second):
		t.Fatalf("the reading client got only %d of %d updates", got.Load(), n)
	}
	t.Logf("published and received in %s", time.Since(t0))
	// The client that never read was dropped by the server (its socket closed; it is no longer a
	// client), while the reading one is still served.
	require.Eventually(t, func() bool {
		return metric(t, reg, "obsops_transfer_ws_dropped_total") == 1 && metric(t, reg, "obsops_transfer_ws_clients") == 1
	}, 20*time.Second, 50*time.Millisecond)
}

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
