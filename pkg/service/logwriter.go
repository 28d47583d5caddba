package service

import (
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/obsops/obsops/pkg/jsonenc"
)

// Access-log buffering: lines are written at the latest after logFlushDelay, or at once when
// logFlushSize bytes have accumulated.
const (
	logFlushDelay = 100 * time.Millisecond
	logFlushSize  = 32 << 10
)

// logWriter is the destination of a service's log. One write(2) per request line costs a busy
// service (and whatever reads its stderr) a system call and a wake-up per request, so access-log
// lines are batched; every other line (slog: startup, warnings, errors) is written at once,
// together with the access lines before it, so order is kept and nothing important waits. A
// crash can lose at most the last logFlushDelay of access lines.
type logWriter struct {
	mu        sync.Mutex
	out       io.Writer
	buf       []byte
	scheduled bool // a delayed flush is pending
}

func newLogWriter(out io.Writer) *logWriter { return &logWriter{out: out} }

// Write writes p, preceded by any buffered access lines (the slog handler's destination).
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return w.out.Write(p)
	}
	w.buf = append(w.buf, p...)
	return len(p), w.flushLocked()
}

// buffer queues one access line; urgent lines (errors) are written at once.
func (w *logWriter) buffer(line []byte, urgent bool) {
	w.mu.Lock()
	w.buf = append(w.buf, line...)
	switch {
	case urgent || len(w.buf) >= logFlushSize:
		_ = w.flushLocked()
	case !w.scheduled:
		w.scheduled = true
		time.AfterFunc(logFlushDelay, w.flush)
	}
	w.mu.Unlock() // not deferred: this runs once per request
}

// flush writes what is buffered (timer, shutdown).
func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scheduled = false
	_ = w.flushLocked()
}

func (w *logWriter) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.out.Write(w.buf)
	if cap(w.buf) > 4*logFlushSize { // do not keep a burst's buffer forever
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	return err
}

// accessLine is one access-log record.
type accessLine struct {
	time      time.Time
	level     slog.Level
	requestID string
	method    string
	path      string
	route     string
	status    int
	duration  time.Duration
	bytesOut  int
	client    string
}

// appendAccessLine encodes l exactly as the service's slog JSON handler would encode
// log.LogAttrs(ctx, l.level, "request", ...) on a logger With("service", service), at a fraction
// of the cost (the access log is written once per request). service is JSON-encoded already.
func appendAccessLine(b []byte, service []byte, l *accessLine) []byte {
	b = append(b, `{"time":"`...)
	b = l.time.Round(0).AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, l.level.String()...)
	b = append(b, `","msg":"request","service":`...)
	b = append(b, service...)
	b = append(b, `,"request_id":`...)
	b = jsonenc.AppendStringNoHTML(b, l.requestID)
	b = append(b, `,"method":`...)
	b = jsonenc.AppendStringNoHTML(b, l.method)
	b = append(b, `,"path":`...)
	b = jsonenc.AppendStringNoHTML(b, l.path)
	b = append(b, `,"route":`...)
	b = jsonenc.AppendStringNoHTML(b, l.route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, `,"duration_ms":`...)
	// json.Marshal's form of a float64, which slog uses: plain decimals in this range.
	if ms := float64(l.duration.Microseconds()) / 1000; ms == 0 || ms >= 1e-6 && ms < 1e21 {
		b = strconv.AppendFloat(b, ms, 'f', -1, 64)
	} else {
		enc, _ := json.Marshal(ms)
		b = append(b, enc...)
	}
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, int64(l.bytesOut), 10)
	b = append(b, `,"client":`...)
	b = jsonenc.AppendStringNoHTML(b, l.client)
	return append(b, "}\n"...)
}
