package gateway

import (
	"bufio"
	"errors"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Pipeline is the gateway's connection pool to one upstream. Unlike a plain keep-alive pool it
// may send a GET or HEAD on a connection that already carries requests (HTTP/1.1 pipelining,
// which the services' fasthttp servers answer in order), and it combines the writes of requests
// queued while another write is under way into one. Under load that turns a system call and a
// wakeup on both sides per request into one per batch, which is most of what a proxy hop costs.
//
// Head-of-line blocking is bounded by who may join a busy connection: only bodiless GET/HEAD
// requests, only under load (several connections busy), only behind other such requests, only
// while the connection's oldest request is younger than JoinWindow, and at most Depth in flight.
// Everything else takes an idle connection or a new one. A request queued behind one that failed
// or timed out is retried on another connection (it is a read); a request alone on a connection
// that broke is retried only if it is idempotent.
//
// There is no reader goroutine: the caller whose request is oldest on a connection reads its own
// answer there and then hands reading over to the next one waiting (whose answer is often in the
// buffer already). A connection used by one request at a time costs what a plain pool costs.
type Pipeline struct {
	dial        func() (net.Conn, error)
	depth       int           // requests in flight on one connection; 1 disables pipelining
	joinWindow  time.Duration // a read joins a busy connection only while its oldest request is younger
	joinMinBusy int           // ... and only while at least this many connections are busy
	maxConns    int
	idleFor     time.Duration
	slack       time.Duration    // how late a timeout may fire
	pipelined   func()           // counts a request sent behind others
	wrote       func()           // counts a write to the upstream
	now         func() time.Time // the clock: time.Now; a test moves its own to age connections

	mu     sync.Mutex
	idle   []*pipeConn // nothing in flight, most recently used last
	busy   []*pipeConn // requests in flight, most recently used last
	open   int         // connections open or being dialled
	closed bool
}

// PipelineOptions configure a Pipeline.
type PipelineOptions struct {
	// Dial connects to the upstream.
	Dial        func() (net.Conn, error)
	Depth       int           // at most this many requests in flight on one connection (1: no pipelining)
	JoinWindow  time.Duration // reads join a busy connection only while its oldest request is younger
	JoinMinBusy int           // ... and only while this many connections are busy (0: 4; 1: always)
	MaxConns    int           // connections open at once; beyond, requests fail with fasthttp.ErrNoFreeConns
	IdleFor     time.Duration // idle connections older than this are closed instead of reused
	// TimeoutSlack is how late a request's timeout may fire (socket deadlines are moved only
	// when they are early or more than this late); 0 means exactly on time.
	TimeoutSlack time.Duration
	Pipelined    func() // called for every request sent behind others (a metric)
	Wrote        func() // called for every write to the upstream (a metric)
}

// NewPipeline makes an empty pool; connections are dialled on demand.
func NewPipeline(o PipelineOptions) *Pipeline {
	if o.Pipelined == nil {
		o.Pipelined = func() {}
	}
	if o.Wrote == nil {
		o.Wrote = func() {}
	}
	if o.JoinMinBusy <= 0 {
		o.JoinMinBusy = defaultJoinMinBusy
	}
	return &Pipeline{
		dial: o.Dial, depth: max(1, o.Depth), joinWindow: o.JoinWindow, joinMinBusy: o.JoinMinBusy,
		maxConns: o.MaxConns, idleFor: o.IdleFor, slack: o.TimeoutSlack, pipelined: o.Pipelined, wrote: o.Wrote,
		now: time.Now,
	}
}

var (
	// ErrPipelineClosed is returned once the pool has been closed (gateway shutdown).
	ErrPipelineClosed = errors.New("upstream connection pool closed")
	// errRetry marks a request that may be sent again on another connection.
	errRetry = errors.New("upstream connection closed before answering")
)

const (
	// defaultJoinMinBusy is the load from which reads join busy connections: with fewer
	// connections busy, a read takes an idle or new one, so a lone slow request holds up nobody.
	defaultJoinMinBusy = 4
	maxUpstreamBody    = 64 << 20 // a service answer larger than this is refused (502)
	maxAttempts        = 3        // sends of one request, retries included
	keepBufferAtMost   = 64 << 10 // buffers that grew beyond this are dropped after use
)

// pipeConn is one upstream connection. Everything but the socket, and the reader buffer that
// only the current reader touches, is guarded by the pool's mutex.
type pipeConn struct {
	conn net.Conn
	br   *bufio.Reader
	// pending are the requests written and not yet answered, oldest first. While there are any,
	// one of their callers holds the reader role. Requests share a connection only when all are
	// reads, so pending[0].read tells whether another read may join.
	pending       []*pipeCall
	out           []byte // queued for the writer in progress
	spare         []byte
	flushing      bool
	deadline      time.Time // the read deadline set on conn
	writeDeadline time.Time // the write deadline set on conn
	lastUse       time.Time
	broken        bool  // out of the pool
	writeErr      error // why a write broke it, reported to the requests in flight
	slot          int   // index in the pool's busy or idle list
}

// pipeCall is one request in flight. Its caller touches resp and err only after done.
type pipeCall struct {
	wire     []byte // the serialized request
	read     bool
	idem     bool
	sent     time.Time // when it was queued on its current connection
	deadline time.Time
	resp     *fasthttp.Response // the caller's; only the reader writes it until done
	err      error
	turn     bool // done was signalled to hand over reading, not to answer
	retry    bool // sent before: it takes a connection of its own, so it cannot be starved
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &pipeCall{done: make(chan struct{}, 1)} }}

// serialize appends req as it goes on the wire to dst: what fasthttp's Request.Write does for a
// request the gateway received (Host and request URI from the URI, the path as the client sent
// it, Content-Length from the body), without a bufio.Writer in between.
func serialize(req *fasthttp.Request, dst []byte) ([]byte, error) {
	uri := req.URI()
	uri.DisablePathNormalizing = true
	if req.IsBodyStream() || len(uri.Username()) > 0 {
		sink := byteSink{b: dst}
		_, err := req.WriteTo(&sink)
		return sink.b, err
	}
	h := &req.Header
	h.SetHostBytes(uri.Host())
	h.SetRequestURIBytes(uri.RequestURI())
	body := req.Body()
	if len(body) > 0 || !(h.IsGet() || h.IsHead()) {
		h.SetContentLength(len(body))
	}
	dst = h.AppendBytes(dst)
	return append(dst, body...), nil
}

// byteSink collects what fasthttp writes into a slice.
type byteSink struct{ b []byte }

// Write appends p.
func (s *byteSink) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

// Do sends req and reads the answer into resp within timeout. Errors are the network's,
// fasthttp.ErrTimeout, fasthttp.ErrNoFreeConns when MaxConns are all in use, or ErrPipelineClosed.
func (p *Pipeline) Do(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	c := callPool.Get().(*pipeCall)
	defer func() {
		c.resp, c.err = nil, nil
		if cap(c.wire) > keepBufferAtMost {
			c.wire = nil
		}
		callPool.Put(c)
	}()
	wire, err := serialize(req, c.wire[:0])
	if err != nil {
		return err
	}
	c.wire = wire
	h := &req.Header
	c.read = (h.IsGet() || h.IsHead()) && len(req.Body()) == 0
	c.idem = c.read || h.IsOptions() || h.IsPut() || h.IsDelete()
	now := p.now()
	c.deadline = now.Add(timeout)
	c.resp = resp
	c.retry = false
	for range maxAttempts {
		c.err = nil
		c.resp.Reset()
		c.resp.SkipBody = h.IsHead()
		if err = p.roundTrip(c, now); err == nil || !errors.Is(err, errRetry) {
			break
		}
		if now = p.now(); !now.Before(c.deadline) {
			break
		}
		c.retry = true
	}
	if re, ok := err.(*retryError); ok {
		err = re.err // the network's error, for the 503 message
	}
	return err
}

// roundTrip sends c on one connection and waits for its answer, reading the connection itself
// when it is its turn.
func (p *Pipeline) roundTrip(c *pipeCall, now time.Time) error {
	pc, reader, err := p.send(c, now)
	if err != nil {
		return err
	}
	for !reader {
		<-c.done
		if !c.turn {
			return c.err
		}
		c.turn, reader = false, true
	}
	p.readFor(pc, c)
	return c.err
}

// send queues c on a connection (joining a busy one, taking an idle one or dialling a new one)
// and writes it, together with whatever others queued meanwhile. It reports whether c must read
// the connection itself (it is the only request in flight there).
func (p *Pipeline) send(c *pipeCall, now time.Time) (*pipeConn, bool, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, ErrPipelineClosed
	}
	pc := p.pick(c, now)
	if pc == nil {
		if p.open >= p.maxConns {
			p.mu.Unlock()
			return nil, false, fasthttp.ErrNoFreeConns
		}
		p.open++
		p.mu.Unlock()
		conn, err := p.dial()
		p.mu.Lock()
		if err == nil && p.closed {
			conn.Close()
			err = ErrPipelineClosed
		}
		if err != nil {
			p.open--
			p.mu.Unlock()
			return nil, false, err
		}
		pc = &pipeConn{conn: conn, br: bufio.NewReaderSize(conn, 8192)}
		p.add(&p.busy, pc)
	}
	if len(pc.pending) > 0 {
		p.pipelined()
	}
	c.sent = now
	pc.pending = append(pc.pending, c)
	pc.setReadDeadline(earliestDeadline(pc.pending), p.slack)
	reader := len(pc.pending) == 1 // alone on the connection: nobody else will read it
	pc.out = append(pc.out, c.wire...)
	if pc.flushing { // the write in progress is followed by this one
		p.mu.Unlock()
		return pc, reader, nil
	}
	pc.flushing = true
	if p.depth > 1 && (len(pc.pending) > 1 || len(p.busy) > 1) {
		// Other requests are in flight, so there is load: let the goroutines that are ready to run
		// (typically those of other client connections that became readable together) queue
		// their requests first, so that one write carries them all.
		p.mu.Unlock()
		runtime.Gosched()
		p.mu.Lock()
	}
	for len(pc.out) > 0 && !pc.broken {
		buf := pc.out
		pc.out = pc.spare[:0]
		p.mu.Unlock()
		pc.setWriteDeadline(c.deadline, p.slack)
		_, err := pc.conn.Write(buf)
		p.wrote()
		p.mu.Lock()
		if cap(buf) <= keepBufferAtMost {
			pc.spare = buf[:0]
		}
		if err != nil && p.retire(pc) {
			pc.writeErr = err
			pc.conn.Close() // the reader answers everything in flight with writeErr
		}
	}
	pc.flushing = false
	p.mu.Unlock()
	return pc, reader, nil
}

// pick chooses a connection for c under p.mu: a busy one c may join, else the most recently used
// idle one (closing those idle for too long), else nil to dial a new one.
func (p *Pipeline) pick(c *pipeCall, now time.Time) *pipeConn {
	if c.read && !c.retry && p.depth > 1 && len(p.busy) >= p.joinMinBusy {
		// Only under load, and only the few most recently used busy connections are looked at:
		// theirs are the youngest oldest requests.
		for i := len(p.busy) - 1; i >= 0 && i >= len(p.busy)-4; i-- {
			pc := p.busy[i]
			if len(pc.pending) > 0 && pc.pending[0].read && len(pc.pending) < p.depth && now.Sub(pc.pending[0].sent) < p.joinWindow {
				return pc
			}
		}
	}
	for n := len(p.idle); n > 0; n = len(p.idle) {
		pc := p.idle[n-1]
		p.remove(&p.idle, pc)
		if now.Sub(pc.lastUse) > p.idleFor || pc.br.Buffered() > 0 || !idleUsable(pc.conn) {
			// Expired, closed by the upstream, or the upstream sent more than was asked for:
			// never reused, so a stray answer cannot reach the next caller.
			pc.broken = true
			p.open--
			pc.conn.Close()
			continue
		}
		p.add(&p.busy, pc)
		return pc
	}
	return nil
}

// readFor reads the answer to self, which is the oldest request on pc, and passes the reader
// role to the next request waiting there, which may find its answer already buffered.
func (p *Pipeline) readFor(pc *pipeConn, self *pipeCall) {
	if err := self.resp.ReadLimitBody(pc.br, maxUpstreamBody); err != nil {
		if isTimeout(err) {
			err = fasthttp.ErrTimeout
		}
		p.fail(pc, err, self)
		return
	}
	closing := self.resp.ConnectionClose()
	p.mu.Lock()
	pc.pending[0] = nil
	pc.pending = pc.pending[1:]
	if closing || pc.broken {
		p.mu.Unlock()
		p.fail(pc, errRetry, self) // what was sent behind it was never read by the upstream
		return
	}
	if len(pc.pending) == 0 {
		pc.pending = pc.pending[:0:0]
		pc.lastUse = self.sent
		p.remove(&p.busy, pc)
		p.add(&p.idle, pc)
		p.closeExpired(self.sent)
		p.mu.Unlock()
		return
	}
	pc.setReadDeadline(earliestDeadline(pc.pending), p.slack)
	next := pc.pending[0]
	p.mu.Unlock()
	next.turn = true
	next.done <- struct{}{}
}

// closeExpired closes, under p.mu, the least recently used idle connection if it has been idle
// longer than IdleFor; called whenever one becomes idle, it keeps the idle list from holding
// sockets the upstream is about to close.
func (p *Pipeline) closeExpired(now time.Time) {
	if len(p.idle) > 1 && now.Sub(p.idle[0].lastUse) > p.idleFor {
		pc := p.idle[0]
		p.retire(pc)
		pc.conn.Close()
	}
}

// answer wakes c's caller, unless c is the reader's own request.
func (c *pipeCall) answer(self *pipeCall) {
	if c != self {
		c.done <- struct{}{}
	}
}

// add appends pc to list (p.busy or p.idle) under p.mu.
func (p *Pipeline) add(list *[]*pipeConn, pc *pipeConn) {
	pc.slot = len(*list)
	*list = append(*list, pc)
}

// remove takes pc out of list under p.mu, keeping the order of the others (recency matters).
func (p *Pipeline) remove(list *[]*pipeConn, pc *pipeConn) {
	l := *list
	if pc.slot >= len(l) || l[pc.slot] != pc {
		return
	}
	copy(l[pc.slot:], l[pc.slot+1:])
	l[len(l)-1] = nil
	l = l[:len(l)-1]
	for i := pc.slot; i < len(l); i++ {
		l[i].slot = i
	}
	*list = l
}

// retire takes pc out of the pool under p.mu, once; it reports whether this call did.
func (p *Pipeline) retire(pc *pipeConn) bool {
	if pc.broken {
		return false
	}
	pc.broken = true
	p.remove(&p.idle, pc)
	p.remove(&p.busy, pc)
	p.open--
	return true
}

// setReadDeadline makes the connection's read deadline d, up to slack later: socket deadlines
// are moved only when they are early or more than slack late, as moving one costs a timer update.
func (pc *pipeConn) setReadDeadline(d time.Time, slack time.Duration) {
	if !pc.deadline.Before(d) && pc.deadline.Sub(d) <= slack {
		return
	}
	pc.deadline = d.Add(slack / 2)
	_ = pc.conn.SetReadDeadline(pc.deadline)
}

// setWriteDeadline is setReadDeadline for writes.
func (pc *pipeConn) setWriteDeadline(d time.Time, slack time.Duration) {
	if !pc.writeDeadline.Before(d) && pc.writeDeadline.Sub(d) <= slack {
		return
	}
	pc.writeDeadline = d.Add(slack / 2)
	_ = pc.conn.SetWriteDeadline(pc.writeDeadline)
}

func earliestDeadline(calls []*pipeCall) time.Time {
	d := calls[0].deadline
	for _, c := range calls[1:] {
		if c.deadline.Before(d) {
			d = c.deadline
		}
	}
	return d
}

// fail closes pc and answers every request still in flight on it (self, the reader, only gets
// its error). A request whose time is up gets the timeout; one that may be sent again (behind
// an upstream's "Connection: close", or idempotent) is retried on another connection; any other
// gets the error.
func (p *Pipeline) fail(pc *pipeConn, err error, self *pipeCall) {
	p.mu.Lock()
	p.retire(pc)
	if pc.writeErr != nil {
		err = pc.writeErr
	}
	calls := pc.pending
	pc.pending = nil
	p.mu.Unlock()
	pc.conn.Close()
	now := p.now()
	for _, c := range calls {
		switch {
		case errors.Is(err, errRetry):
			c.err = err
		case !now.Before(c.deadline):
			c.err = fasthttp.ErrTimeout
		case c.idem:
			c.err = &retryError{err}
		default:
			c.err = err
		}
		c.answer(self)
	}
}

// retryError wraps the network error behind a retry, so that a last failed attempt reports it.
type retryError struct{ err error }

// Error is the network error's text.
func (e *retryError) Error() string { return e.err.Error() }

// Unwrap makes the error both errRetry and the network error for errors.Is and errors.As.
func (e *retryError) Unwrap() []error { return []error{errRetry, e.err} }

// Close closes every connection; requests in flight fail and new ones get ErrPipelineClosed.
func (p *Pipeline) Close() {
	p.mu.Lock()
	p.closed = true
	conns := slices.Concat(p.idle, p.busy)
	p.mu.Unlock()
	for _, pc := range conns {
		pc.conn.Close() // whoever reads it answers what is in flight
	}
}
