package service

import (
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
)

// requestInfo is what the chassis works out once per request for every later use.
type requestInfo struct {
	id      string
	client  string // the client address (ClientIP)
	trusted bool   // the caller may name the client (Trusted)
}

const requestInfoKey = "obsops.request"

func requestInfoOf(c *fiber.Ctx) *requestInfo {
	ri, _ := c.Locals(requestInfoKey).(*requestInfo)
	return ri
}

// RequestIDHeader carries the request id from the gateway through every service and back.
const RequestIDHeader = "X-Request-ID"

// RequestID returns the id of the request being handled.
func RequestID(c *fiber.Ctx) string {
	if ri := requestInfoOf(c); ri != nil {
		return ri.id
	}
	return ""
}

// ClientIP is the client address the chassis' ClientAddressFunc worked out for this request:
// what failed-credential budgets, rate limits, token usage and access logs use. Outside the
// chassis it is the connection's address.
func ClientIP(c *fiber.Ctx) string {
	if ri := requestInfoOf(c); ri != nil {
		return ri.client
	}
	return c.Context().RemoteIP().String()
}

// Trusted reports whether the caller was trusted to name the client (see ClientAddressFunc):
// at the gateway a configured proxy in front of it; behind the gateway a caller that presented
// the internal secret (the gateway, or another obsops service).
func Trusted(c *fiber.Ctx) bool {
	if ri := requestInfoOf(c); ri != nil {
		return ri.trusted
	}
	return false
}

// ClientAddressFunc works out, once per request, the client address and whether the caller
// was trusted to name it. It may rewrite the request's headers (InternalClient removes the
// secret it checked).
type ClientAddressFunc func(c *fiber.Ctx) (client string, trusted bool)

// InternalClient is the client-address rule of a service behind the gateway. A request that
// carries the internal secret (compared in constant time) comes from the gateway or another
// service: its X-Real-IP, when it is an IP address, is the client. Any other request — a
// spoofed X-Real-IP from a pod or a container on the same network included — is its
// connection's address. With an empty secret nothing is trusted. The secret header is removed
// once checked, so no handler, log or onward call sees it.
func InternalClient(secret string) ClientAddressFunc {
	want := []byte(secret)
	return func(c *fiber.Ctx) (string, bool) {
		h := &c.Request().Header
		got := h.Peek(contract.InternalSecretHeader)
		if len(got) == 0 {
			return c.Context().RemoteIP().String(), false
		}
		ok := len(want) > 0 && subtle.ConstantTimeCompare(got, want) == 1
		h.Del(contract.InternalSecretHeader)
		if !ok {
			return c.Context().RemoteIP().String(), false
		}
		if addr, err := netip.ParseAddr(string(h.Peek(contract.ForwardedClientHeader))); err == nil {
			return addr.Unmap().String(), true
		}
		return c.Context().RemoteIP().String(), true
	}
}

// identify works out who is calling (clientAddress) and the request's id, once per request. A
// well-formed incoming X-Request-ID is kept (so one id follows a request through the gateway
// into the services), otherwise a new one is made; either way it is passed on (the response
// echo is set by trackRequests, once the response is final).
func identify(c *fiber.Ctx, clientAddress ClientAddressFunc) *requestInfo {
	ri := &requestInfo{}
	ri.client, ri.trusted = clientAddress(c)
	ri.id = c.Get(RequestIDHeader)
	if !validRequestID(ri.id) {
		ri.id = newRequestID()
	}
	c.Locals(requestInfoKey, ri)
	// RequestIDHeader in fasthttp's canonical form, which spares normalizing it per request.
	c.Request().Header.SetCanonical([]byte("X-Request-Id"), []byte(ri.id))
	return ri
}

// newRequestID makes a random (version 4) UUID from the runtime's per-thread ChaCha8 generator:
// unique for all practical purposes and much cheaper than crypto/rand. Request ids are labels,
// not secrets.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// validRequestID keeps ids short and printable so they cannot forge log lines.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':') {
			return false
		}
	}
	return true
}

// httpMetrics are the chassis' request series. Looking a labelled series up costs hashing its
// label values and formatting the status on every request, so each (method, route, status)
// series is looked up once and kept.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[seriesKey]routeSeries
}

type seriesKey struct {
	method, route string
	status        int
}

type routeSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_http_requests_total", Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "obsops_http_request_duration_seconds", Help: "HTTP request latency by method and route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
		series: map[seriesKey]routeSeries{},
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// methodLabel returns the request method as a constant string. Fiber's c.Method() aliases the
// request buffer that fasthttp reuses, so it must not be kept (as a map key or metric label);
// unknown methods share one label, which also bounds the metric's cardinality.
func methodLabel(m string) string {
	switch m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodOptions:
		return fiber.MethodOptions
	default:
		return "OTHER"
	}
}

// observe counts one request. method and route must not alias a request buffer: method comes
// from methodLabel, route is the registered route template.
func (m *httpMetrics) observe(method, route string, status int, elapsed time.Duration) {
	k := seriesKey{method, route, status}
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		s = routeSeries{
			requests: m.requests.WithLabelValues(method, route, strconv.Itoa(status)),
			duration: m.duration.WithLabelValues(method, route),
		}
		m.mu.Lock()
		m.series[k] = s
		m.mu.Unlock()
	}
	s.requests.Inc()
	s.duration.Observe(elapsed.Seconds())
}

// trackRequests is the chassis' outermost middleware: it identifies each request (see identify),
// then writes one JSON access line for it (to out, in the form of log's JSON handler, see
// appendAccessLine) and records its metrics. It turns a handler's error into the response here
// (not after the chain) so the logged status is the one sent, and then echoes the request id on
// the final response: after a handler that replaced the whole response (the gateway relaying an
// upstream's answer, or resetting it for its 502) and after the error handler. The one answer it
// never sees is the server's own to a request rejected before routing (413 for an oversize body,
// 431), which Fiber renders with the error handler alone.
func trackRequests(clientAddress ClientAddressFunc, log *slog.Logger, service string, out *logWriter, m *httpMetrics) fiber.Handler {
	svc, _ := json.Marshal(service)
	lines := sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}
	return func(c *fiber.Ctx) error {
		ri := identify(c, clientAddress)
		start := c.Context().Time() // when the server began handling the request
		if start.IsZero() {
			start = time.Now()
		}
		if err := c.Next(); err != nil {
			if cause := problem.Cause(err); cause != nil {
				log.Error("request failed", "request_id", ri.id, "path", c.Path(), "error", cause.Error())
			}
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
		}
		// RequestIDHeader in fasthttp's canonical form, which spares normalizing it per request.
		c.Response().Header.SetCanonical([]byte("X-Request-Id"), []byte(ri.id))
		end := time.Now()
		elapsed := end.Sub(start)
		status := c.Response().StatusCode()
		route := c.Route().Path
		path := c.Path()
		if status == fiber.StatusNotFound && route == "/" && path != "/" {
			route = "unmatched"
		}
		m.observe(methodLabel(c.Method()), route, status, elapsed)

		level := slog.LevelInfo
		switch {
		case path == "/healthz" || path == "/readyz" || path == "/metrics":
			level = slog.LevelDebug
		case status >= 500:
			level = slog.LevelError
		}
		if !log.Enabled(c.UserContext(), level) {
			return nil
		}
		l := accessLine{
			time: end, level: level, requestID: ri.id, method: c.Method(), path: path, route: route,
			status: status, duration: elapsed, bytesOut: len(c.Response().Body()), client: ri.client,
		}
		bp := lines.Get().(*[]byte)
		*bp = appendAccessLine((*bp)[:0], svc, &l)
		out.buffer(*bp, level >= slog.LevelWarn)
		lines.Put(bp)
		return nil
	}
}

// recoverPanics turns a panic into a logged 500 problem instead of a dropped connection.
func recoverPanics(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic", "request_id", RequestID(c), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = problem.Internal.New("") // logged above, with the stack
			}
		}()
		return c.Next()
	}
}

func metricsHandler(reg *prometheus.Registry) fiber.Handler {
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return func(c *fiber.Ctx) error {
		h(c.Context())
		return nil
	}
}

// AddressKey is the part of a client address that budgets and rate limits count by: an IPv4
// address itself, an IPv6 address's /64 (one host usually holds a whole /64, and counting its
// addresses one by one would give it 2^64 budgets and as many Redis keys).
func AddressKey(ip string) string {
	if !strings.Contains(ip, ":") { // IPv4 as ClientIP gives it: already the key (hot path)
		return ip
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}
