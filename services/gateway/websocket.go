package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// maxHandshakeHead bounds the upstream's answer to a WebSocket handshake.
const maxHandshakeHead = 64 << 10

// hijackGrace is how long a registered tunnel may wait for fasthttp to hand over the connection.
const hijackGrace = 10 * time.Second

// closeGoingAway is the WebSocket close code sent to clients when the gateway ends a tunnel
// they did not end themselves (RFC 6455 §7.4.1: 1001, "going away").
const closeGoingAway = 1001

// isWebSocketUpgrade reports whether req asks to become a WebSocket (RFC 6455 §4.1).
func isWebSocketUpgrade(req *fasthttp.Request) bool {
	return req.Header.IsGet() && req.Header.ConnectionUpgrade() &&
		bytes.EqualFold(req.Header.Peek(fiber.HeaderUpgrade), []byte("websocket"))
}

// Tunnels tracks the open WebSocket tunnels. The HTTP server's shutdown does not see hijacked
// connections, so the gateway closes them itself (CloseAll, a shutdown hook): each client gets a
// close frame 1001 (going away) and reconnects, possibly to another replica.
type Tunnels struct {
	log     *slog.Logger
	metrics *Metrics
	mu      sync.Mutex
	open    map[*tunnel]struct{}
	closing bool
	wg      sync.WaitGroup
}

// NewTunnels returns an empty registry.
func NewTunnels(log *slog.Logger, m *Metrics) *Tunnels {
	return &Tunnels{log: log, metrics: m, open: map[*tunnel]struct{}{}}
}

// add registers t; it fails once CloseAll has begun.
func (ts *Tunnels) add(t *tunnel) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closing {
		return false
	}
	ts.open[t] = struct{}{}
	ts.wg.Add(1)
	ts.metrics.tunnelsOpen.Inc()
	ts.metrics.tunnelsTotal.Inc()
	return true
}

func (ts *Tunnels) remove(t *tunnel) {
	ts.mu.Lock()
	if _, ok := ts.open[t]; ok {
		delete(ts.open, t)
		ts.metrics.tunnelsOpen.Dec()
		ts.wg.Done()
	}
	ts.mu.Unlock()
}

// CloseAll refuses new tunnels, ends every open one (its client gets close 1001) and waits for
// them to finish or ctx to end.
func (ts *Tunnels) CloseAll(ctx context.Context) error {
	ts.mu.Lock()
	ts.closing = true
	open := make([]*tunnel, 0, len(ts.open))
	for t := range ts.open {
		open = append(open, t)
	}
	ts.mu.Unlock()
	if len(open) > 0 {
		ts.log.Info("closing websocket tunnels", "count", len(open))
	}
	for _, t := range open {
		t.stop()
	}
	done := make(chan struct{})
	go func() { ts.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("websocket tunnels still open at the shutdown deadline")
	}
}

// tunnel is one client WebSocket connection piped to its upstream.
type tunnel struct {
	owner      *Tunnels
	service    string
	path       string
	requestID  string
	head       []byte // the upstream's 101 answer, relayed verbatim
	upstream   net.Conn
	upR        *bufio.Reader // holds whatever the upstream sent right after its 101
	running    atomic.Bool   // the hijack handler has started
	stopping   atomic.Bool
	clientGone atomic.Bool
	started    time.Time
	bytesUp    int64 // written by run's client -> upstream goroutine before it closes done; read after
	bytesDown  int64 // written and read by run's goroutine (pump)
}

// stop ends the tunnel from the gateway's side: closing the upstream connection makes the pump
// send close 1001 to the client.
func (t *tunnel) stop() {
	t.stopping.Store(true)
	_ = t.upstream.Close()
}

// tunnel performs the WebSocket handshake with the upstream and, when it accepts (101), hijacks
// the client connection and pipes bytes both ways. Any other answer is relayed as an ordinary
// response (e.g. the service's 401 problem for a missing token); a dead or slow upstream gives
// the usual 503/504 problem before anything is hijacked.
func (u *Upstream) tunnel(c *fiber.Ctx) error {
	req := c.Request()
	req.Header.Del("Proxy-Authorization")
	setForwardedHeaders(c, u.secret)
	req.SetHost(u.Addr)

	conn, err := u.dial()
	if err != nil {
		return u.fail(err)
	}
	_ = conn.SetDeadline(time.Now().Add(u.timeout))
	wire, err := serialize(req, nil) // Host and request URI as Forward sends them
	if err != nil {
		_ = conn.Close()
		return u.fail(err)
	}
	if _, err := conn.Write(wire); err != nil {
		_ = conn.Close()
		return u.fail(err)
	}
	br := bufio.NewReaderSize(conn, 16<<10)
	raw, status, err := readResponseHead(br)
	if err != nil {
		_ = conn.Close()
		return u.fail(err)
	}
	if status != fiber.StatusSwitchingProtocols {
		defer conn.Close()
		resp := c.Response()
		if err := resp.Read(bufio.NewReader(io.MultiReader(bytes.NewReader(raw), br))); err != nil {
			resp.Reset()
			return u.fail(err)
		}
		stripHop(resp.Header.All(), resp.Header.Del)
		return nil
	}
	_ = conn.SetDeadline(time.Time{})

	t := &tunnel{
		owner: u.tunnels, service: u.Name, path: strings.Clone(c.Path()), requestID: strings.Clone(service.RequestID(c)),
		head: raw, upstream: conn, upR: br, started: time.Now(),
	}
	if !u.tunnels.add(t) {
		_ = conn.Close()
		return problem.New(fiber.StatusServiceUnavailable, "the gateway is shutting down; reconnect")
	}
	c.Status(fiber.StatusSwitchingProtocols) // for the access log; the upstream's own 101 is what the client gets
	fctx := c.Context()
	fctx.HijackSetNoResponse(true)
	fctx.Hijack(t.run)
	// fasthttp skips the hijack handler if the connection fails first: do not leak the tunnel.
	time.AfterFunc(hijackGrace, func() {
		if !t.running.Load() {
			t.stop()
			t.owner.remove(t)
		}
	})
	return nil
}

// run pipes the hijacked client connection and the upstream until either side ends.
func (t *tunnel) run(client net.Conn) {
	t.running.Store(true)
	defer t.owner.remove(t)
	raw := client // client reads go through fasthttp's buffer; Close must reach the socket
	if u, ok := client.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn()
	}
	if _, err := raw.Write(t.head); err != nil {
		_ = t.upstream.Close()
		t.owner.log.Info("websocket tunnel failed", "request_id", t.requestID, "service", t.service, "error", err.Error())
		return
	}
	done := make(chan struct{})
	go func() { // client -> upstream
		defer close(done)
		n, _ := io.Copy(t.upstream, client)
		t.bytesUp = n
		t.clientGone.Store(true)
		_ = t.upstream.Close()
	}()
	reason := t.pump(raw)
	_ = raw.SetReadDeadline(time.Now()) // end the client -> upstream copy now
	_ = raw.Close()
	_ = t.upstream.Close()
	<-done
	t.owner.log.Info("websocket tunnel closed",
		slog.String("request_id", t.requestID), slog.String("service", t.service), slog.String("path", t.path),
		slog.String("reason", reason), slog.Float64("duration_s", time.Since(t.started).Seconds()),
		slog.Int64("bytes_to_upstream", t.bytesUp), slog.Int64("bytes_to_client", t.bytesDown))
}

// pump copies upstream -> client, following frame boundaries so that, when the upstream side
// ends without a close frame (gateway shutdown, service crash), the client still gets a proper
// close frame 1001 instead of a torn connection.
func (t *tunnel) pump(client net.Conn) string {
	buf := make([]byte, 32<<10)
	var frames frameTracker
	for {
		n, err := t.upR.Read(buf)
		if n > 0 {
			frames.feed(buf[:n])
			if _, werr := client.Write(buf[:n]); werr != nil {
				return "client gone"
			}
			t.bytesDown += int64(n)
		}
		if err == nil {
			continue
		}
		switch {
		case frames.sawClose:
			return "closed by upstream"
		case t.clientGone.Load():
			return "closed by client"
		case !frames.atBoundary():
			return "upstream ended mid-frame"
		}
		reason := "upstream went away"
		if t.stopping.Load() {
			reason = "gateway shutting down"
		}
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = client.Write(closeFrame(closeGoingAway, reason))
		return reason
	}
}

// readResponseHead reads an HTTP/1.1 response head (status line and headers, up to the empty
// line) verbatim and returns it with the status code.
func readResponseHead(br *bufio.Reader) ([]byte, int, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			return nil, 0, err
		}
		if len(head) > maxHandshakeHead {
			return nil, 0, errors.New("upstream handshake answer too large")
		}
		if len(line) <= 2 && len(head) > len(line) { // "\r\n" or "\n" after the headers
			break
		}
	}
	// "HTTP/1.1 101 Switching Protocols"
	first, _, _ := bytes.Cut(head, []byte("\n"))
	fields := bytes.Fields(first)
	if len(fields) < 2 || !bytes.HasPrefix(fields[0], []byte("HTTP/")) {
		return nil, 0, errors.New("malformed upstream status line")
	}
	status, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return nil, 0, errors.New("malformed upstream status code")
	}
	return head, status, nil
}

// closeFrame is an unmasked (server to client) close frame with a code and a short reason.
func closeFrame(code uint16, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	f := make([]byte, 4, 4+len(reason))
	f[0] = 0x88 // FIN + opcode close
	f[1] = byte(2 + len(reason))
	binary.BigEndian.PutUint16(f[2:], code)
	return append(f, reason...)
}

// frameTracker follows WebSocket frame boundaries in a byte stream (RFC 6455 §5.2) without
// buffering payloads, so the gateway knows where it may inject its own close frame.
type frameTracker struct {
	hdr       [14]byte
	hdrN      int    // header bytes of the current frame seen so far
	need      int    // header bytes needed
	remaining uint64 // payload bytes of the current frame still to come
	sawClose  bool   // a close frame started
}

// feed consumes the next bytes of the stream.
func (f *frameTracker) feed(p []byte) {
	for len(p) > 0 {
		if f.remaining > 0 {
			k := f.remaining
			if uint64(len(p)) < k {
				k = uint64(len(p))
			}
			f.remaining -= k
			p = p[k:]
			continue
		}
		if f.hdrN == 0 {
			f.need = 2
		}
		n := copy(f.hdr[f.hdrN:f.need], p)
		f.hdrN += n
		p = p[n:]
		if f.hdrN < f.need {
			return
		}
		if f.need == 2 {
			full := 2
			switch f.hdr[1] & 0x7f {
			case 126:
				full += 2
			case 127:
				full += 8
			}
			if f.hdr[1]&0x80 != 0 { // masked
				full += 4
			}
			if full > 2 {
				f.need = full
				continue
			}
		}
		var length uint64
		switch l := f.hdr[1] & 0x7f; l {
		case 126:
			length = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		case 127:
			length = binary.BigEndian.Uint64(f.hdr[2:10])
		default:
			length = uint64(l)
		}
		if f.hdr[0]&0x0f == 0x8 {
			f.sawClose = true
		}
		f.remaining = length
		f.hdrN = 0
	}
}

// atBoundary reports whether the stream so far ends exactly between two frames.
func (f *frameTracker) atBoundary() bool { return f.hdrN == 0 && f.remaining == 0 }
