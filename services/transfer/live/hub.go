// Package live serves the overview WebSocket (/api/transfer/ws/overview): a snapshot on
// connect, then every update published on the Redis channel ops:transfer:overview (by the active
// planner, at whichever replica), and a heartbeat. Each replica's hub fans updates out to its
// own clients; a client that does not read is dropped without slowing the others, and every
// socket is closed with 1001 on shutdown.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
)

// sendBuffer is how many messages may wait for a slow client before it is dropped.
const sendBuffer = 16

// writeTimeout bounds one write to a client.
const writeTimeout = 10 * time.Second

// OverviewSource answers the overview a new client's snapshot shows (transfer.Service).
type OverviewSource interface {
	Overview(ctx context.Context) (*transfer.Overview, error)
}

// Hub tracks this replica's overview WebSocket clients.
type Hub struct {
	Overviews  OverviewSource
	Redis      *redis.Client
	Log        *slog.Logger
	Heartbeat  time.Duration
	MaxPerUser int

	lastSeq atomic.Int64
	mu      sync.Mutex
	clients map[*client]struct{}
	perUser map[string]int
	closing bool
	wg      sync.WaitGroup

	open    prometheus.Gauge
	dropped prometheus.Counter
}

type client struct {
	user    string
	send    chan update
	closed  chan struct{}
	once    sync.Once
	conn    *websocket.Conn
	lastSeq int64
	dropped atomic.Bool // set by broadcast (under the hub's lock) when the client fell behind
}

func (c *client) close() { c.once.Do(func() { close(c.closed) }) }

// NewHub returns a hub registering its metrics with reg.
func NewHub(overviews OverviewSource, rdb *redis.Client, log *slog.Logger, heartbeat time.Duration, maxPerUser int, reg prometheus.Registerer) *Hub {
	h := &Hub{Overviews: overviews, Redis: rdb, Log: log, Heartbeat: heartbeat, MaxPerUser: maxPerUser,
		clients: map[*client]struct{}{}, perUser: map[string]int{},
		open:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "obsops_transfer_ws_clients", Help: "Open overview WebSocket connections."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "obsops_transfer_ws_dropped_total", Help: "Overview WebSocket clients dropped for not reading."}),
	}
	if reg != nil {
		reg.MustRegister(h.open, h.dropped)
	}
	return h
}

// Run receives updates from Redis and fans them out until ctx ends (resubscribing after errors).
func (h *Hub) Run(ctx context.Context) {
	for ctx.Err() == nil {
		sub := h.Redis.Subscribe(ctx, transfer.OverviewChannel)
		ch := sub.Channel(redis.WithChannelSize(1024))
	recv:
		for {
			select {
			case <-ctx.Done():
				break recv
			case m, ok := <-ch:
				if !ok {
					break recv
				}
				h.broadcast([]byte(m.Payload))
			}
		}
		_ = sub.Close()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

type seqOnly struct {
	Seq int64 `json:"seq"`
}

// update is one published message with its seq, parsed once for all clients.
type update struct {
	seq     int64
	payload []byte
}

func (h *Hub) broadcast(payload []byte) {
	var m seqOnly
	if err := json.Unmarshal(payload, &m); err != nil {
		return
	}
	for {
		cur := h.lastSeq.Load()
		if m.Seq <= cur || h.lastSeq.CompareAndSwap(cur, m.Seq) {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		if c.dropped.Load() {
			continue
		}
		select {
		case c.send <- update{m.Seq, payload}:
		default: // not reading: drop it, the others go on
			c.dropped.Store(true)
			h.dropped.Inc()
			c.close()
			_ = c.conn.NetConn().Close() // unblocks a write stuck on it
		}
	}
}

const principalLocal = "transfer.principal"

// Admit runs before the upgrade: it refuses a user over the per-user limit (429) and reserves
// the connection slot the handler releases.
func (h *Hub) Admit(c *fiber.Ctx) error {
	if !websocket.IsWebSocketUpgrade(c) {
		return problem.Write(c, problem.New(fiber.StatusUpgradeRequired, "this endpoint is a WebSocket: send an upgrade request"))
	}
	p := authn.PrincipalFrom(c.UserContext())
	if p == nil {
		return problem.Write(c, problem.New(fiber.StatusUnauthorized, "a session JWT is required"))
	}
	h.mu.Lock()
	switch {
	case h.closing:
		h.mu.Unlock()
		return problem.Write(c, problem.New(fiber.StatusServiceUnavailable, "shutting down; reconnect"))
	case h.perUser[p.Username] >= h.MaxPerUser:
		h.mu.Unlock()
		c.Set(fiber.HeaderRetryAfter, "5")
		return problem.Write(c, problem.New(fiber.StatusTooManyRequests, "too many open overview connections for this user (OPS_WS_MAX_PER_USER)"))
	}
	h.perUser[p.Username]++
	h.wg.Add(1)
	h.mu.Unlock()
	c.Locals(principalLocal, p.Username)
	if err := c.Next(); err != nil || c.Response().StatusCode() != fiber.StatusSwitchingProtocols {
		h.release(p.Username)
		return err
	}
	return nil
}

func (h *Hub) release(user string) {
	h.mu.Lock()
	if h.perUser[user]--; h.perUser[user] <= 0 {
		delete(h.perUser, user)
	}
	h.mu.Unlock()
	h.wg.Done()
}

// Handler is the WebSocket handler (after Admit).
func (h *Hub) Handler() fiber.Handler {
	return websocket.New(h.serve)
}

func (h *Hub) serve(conn *websocket.Conn) {
	user, _ := conn.Locals(principalLocal).(string)
	defer h.release(user)
	c := &client{user: user, send: make(chan update, sendBuffer), closed: make(chan struct{}), conn: conn}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		h.closeWith(conn, websocket.CloseGoingAway, "server shutting down")
		return
	}
	h.clients[c] = struct{}{}
	h.open.Inc()
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.clients, c)
		h.open.Dec()
		h.mu.Unlock()
		_ = conn.Close()
	}()

	// A fresh snapshot on every connect (also with ?since=SEQ: updates are not replayed).
	if err := h.snapshot(c); err != nil {
		h.Log.Warn("overview snapshot", "error", err)
		h.closeWith(conn, websocket.CloseInternalServerErr, "snapshot unavailable")
		return
	}
	go func() { // reader: notices the client leaving; its messages are ignored
		conn.SetReadLimit(4096)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				c.close()
				return
			}
		}
	}()
	beat := time.NewTicker(h.Heartbeat)
	defer beat.Stop()
	var beatBuf []byte
	for {
		select {
		case <-c.closed:
			return
		case u := <-c.send:
			if u.seq <= c.lastSeq {
				continue // older than what this client has seen
			}
			if err := h.write(c, u.payload); err != nil {
				return
			}
			c.lastSeq = u.seq
		case <-beat.C:
			beatBuf = appendHeartbeat(beatBuf[:0], c.lastSeq, time.Now())
			if err := h.write(c, beatBuf); err != nil {
				return
			}
		}
	}
}

// appendHeartbeat appends {"type":"heartbeat","seq":seq,"at":at} to b: every client sends one per
// OPS_WS_HEARTBEAT, so it is written into the client's own buffer rather than marshalled.
func appendHeartbeat(b []byte, seq int64, at time.Time) []byte {
	b = append(b, `{"type":"heartbeat","seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"at":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

func (h *Hub) snapshot(c *client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o, err := h.Overviews.Overview(ctx)
	if err != nil {
		return err
	}
	if s := h.lastSeq.Load(); s > o.Seq {
		o.Seq = s
	}
	seq := o.Seq
	b, err := json.Marshal(transfer.Message{Type: "snapshot", Overview: o})
	if err != nil {
		return err
	}
	if err := h.write(c, b); err != nil {
		return err
	}
	c.lastSeq = seq
	return nil
}

func (h *Hub) write(c *client, b []byte) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.conn.WriteMessage(websocket.TextMessage, b)
}

func (h *Hub) closeWith(conn *websocket.Conn, code int, text string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// CloseAll refuses new connections, closes every open one with 1001 (going away) and waits for
// their handlers to end or ctx to expire. The HTTP server's shutdown does not see hijacked
// connections, so this runs as a shutdown hook.
func (h *Hub) CloseAll(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	open := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		open = append(open, c)
	}
	h.mu.Unlock()
	for _, c := range open {
		h.closeWith(c.conn, websocket.CloseGoingAway, "server shutting down")
		c.close()
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("overview websockets still open at the shutdown deadline")
	}
}
