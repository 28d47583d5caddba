package gateway

import (
	"crypto/tls"
	"errors"
	"iter"
	"math/bits"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// Upstream is one service behind the gateway and the pooled client that reaches it.
type Upstream struct {
	Name        string // service name, as in Routes
	Addr        string // host:port
	pool        *Pipeline
	scheme      string // http or https
	timeout     time.Duration
	dialTimeout time.Duration
	tunnels     *Tunnels
	metrics     *Metrics
	secret      []byte // OPS_INTERNAL_SECRET, sent with every forwarded request
}

// NewUpstream parses baseURL (http://host:port) and prepares a connection pool to it. pipe bounds
// how requests may share connections (Depth, JoinWindow, optionally JoinMinBusy; see Pipeline);
// the rest of it (Dial, MaxConns, IdleFor, TimeoutSlack, Pipelined, Wrote) is set here. WebSocket
// upgrades are tunnelled and registered with tunnels, so shutdown can close them. secret
// (OPS_INTERNAL_SECRET) goes with every request, so the service believes the client address.
func NewUpstream(name, baseURL string, timeout, dialTimeout time.Duration, pipe PipelineOptions,
	tunnels *Tunnels, m *Metrics, secret string) (*Upstream, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	up := &Upstream{
		Name:        name,
		Addr:        addr,
		scheme:      u.Scheme,
		timeout:     timeout,
		dialTimeout: dialTimeout,
		tunnels:     tunnels,
		metrics:     m,
		secret:      []byte(secret),
	}
	pipe.Dial = up.dial
	pipe.MaxConns = 2048
	pipe.IdleFor = 90 * time.Second
	// Timeouts may fire up to a tenth (at most a second) late, which spares a timer update per
	// request.
	pipe.TimeoutSlack = min(time.Second, timeout/10)
	pipe.Pipelined = m.pipelined.WithLabelValues(name).Inc
	pipe.Wrote = m.upstreamWrites.WithLabelValues(name).Inc
	up.pool = NewPipeline(pipe)
	return up, nil
}

// Hop-by-hop headers are connection-scoped and never forwarded (RFC 9110 §7.6.1). Each has an
// index; hopBit classifies a header name as the bit 1<<index and hopNames names each index.
const (
	hopConnection = iota
	hopKeepAlive
	hopProxyAuthenticate
	hopProxyAuthorization
	hopTE
	hopTrailer
	hopTransferEncoding
	hopUpgrade
	hopCount
)

// hopNames are the hop-by-hop header names in fasthttp's normalized form, by index.
var hopNames = [hopCount]string{
	hopConnection:         "Connection",
	hopKeepAlive:          "Keep-Alive",
	hopProxyAuthenticate:  "Proxy-Authenticate",
	hopProxyAuthorization: "Proxy-Authorization",
	hopTE:                 "Te",
	hopTrailer:            "Trailer",
	hopTransferEncoding:   "Transfer-Encoding",
	hopUpgrade:            "Upgrade",
}

// hopBit classifies a (normalized) header name: 1<<index for a hop-by-hop header (see hopNames),
// 0 for end-to-end headers.
func hopBit(k []byte) uint {
	switch string(k) {
	case "Connection":
		return 1 << hopConnection
	case "Keep-Alive":
		return 1 << hopKeepAlive
	case "Proxy-Authenticate":
		return 1 << hopProxyAuthenticate
	case "Proxy-Authorization":
		return 1 << hopProxyAuthorization
	case "Te":
		return 1 << hopTE
	case "Trailer":
		return 1 << hopTrailer
	case "Transfer-Encoding":
		return 1 << hopTransferEncoding
	case "Upgrade":
		return 1 << hopUpgrade
	}
	return 0
}

// stripHop deletes the hop-by-hop headers among all (a header's All) with del (its Del). It
// scans once and deletes only what is present (deleting each name blindly costs more than the
// whole scan on this hot path), after the scan, never while iterating. It must stay inlinable
// (go build -gcflags=-m: cost 77 of 80): inlined, the header's iterator and the closure are
// inlined too and nothing is allocated; called, the closure and present would escape to the heap
// on every request.
func stripHop(all iter.Seq2[[]byte, []byte], del func(string)) {
	present := uint(0)
	all(func(k, _ []byte) bool { present |= hopBit(k); return true })
	for ; present != 0; present &= present - 1 {
		del(hopNames[bits.TrailingZeros(present)])
	}
}

// Forward relays the request to the upstream and its answer back; a WebSocket upgrade is
// tunnelled instead. A refused connection or an exhausted pool is a 503 with Retry-After and a
// slow upstream a 504, each as problem+json and quickly. The chassis sets X-Request-ID on whatever response
// results, so an upstream that does not echo the id cannot break "request id out".
func (u *Upstream) Forward(c *fiber.Ctx) error {
	req := c.Request()
	if isWebSocketUpgrade(req) {
		return u.tunnel(c)
	}
	clientClose := req.Header.ConnectionClose()
	stripHop(req.Header.All(), req.Header.Del)
	setForwardedHeaders(c, u.secret)
	req.SetHost(u.Addr)

	resp := c.Response()
	if err := u.pool.Do(req, resp, u.timeout); err != nil {
		resp.Reset()
		return u.fail(err)
	}
	stripHop(resp.Header.All(), resp.Header.Del)
	resp.Header.Del(fiber.HeaderServer)
	if v := resp.Header.Peek(contract.CredentialVerifiedHeader); len(v) > 0 { // for the rate limiter, not the client
		c.Locals(verifiedKey, string(v))
		resp.Header.Del(contract.CredentialVerifiedHeader)
	}
	if clientClose { // the client's wish about its own connection, not the upstream's
		resp.SetConnectionClose()
	}
	return nil
}

// verifiedKey marks (in the request's locals) an answer whose upstream verified the credential.
const verifiedKey = "obsops.credential-verified"

// verifiedAccount is the account (contract.CredentialVerifiedHeader's value) of the credential
// of c if the upstream that answered verified it, else "".
func verifiedAccount(c *fiber.Ctx) string {
	v, _ := c.Locals(verifiedKey).(string)
	return v
}

// Close closes the connections to the upstream (after the gateway stopped serving).
func (u *Upstream) Close() { u.pool.Close() }

// fail turns a transport error into the gateway's problem and counts it. The problem names the
// service, never its address or the dial error: those are its cause, which the chassis logs
// with the request id (and obsops_gateway_upstream_errors_total counts by service).
func (u *Upstream) fail(err error) *problem.Problem {
	p := upstreamProblem(u.Name, err).WithCause(err)
	u.metrics.upstreamErrors.WithLabelValues(u.Name, strconv.Itoa(p.Status)).Inc()
	return p
}

// dial opens a raw connection to the upstream (WebSocket tunnels).
func (u *Upstream) dial() (net.Conn, error) {
	if u.scheme == "https" {
		host, _, _ := net.SplitHostPort(u.Addr)
		d := &net.Dialer{Timeout: u.dialTimeout}
		return tls.DialWithDialer(d, "tcp", u.Addr, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	}
	return fasthttp.DialTimeout(u.Addr, u.dialTimeout)
}

// setForwardedHeaders tells the service who the client is, and proves with the internal secret
// that the gateway says so (a service takes X-Real-IP only with it; a client's own copy of the
// secret header is replaced, or removed when the gateway has no secret). The names are given in
// canonical form, which spares fasthttp normalizing them per request.
func setForwardedHeaders(c *fiber.Ctx, secret []byte) {
	h := &c.Request().Header
	ip := service.ClientIP(c)
	trusted := service.Trusted(c)
	if prior := h.Peek(fiber.HeaderXForwardedFor); len(prior) > 0 && trusted {
		h.SetCanonical([]byte(fiber.HeaderXForwardedFor), []byte(string(prior)+", "+ip))
	} else {
		h.SetCanonical([]byte(fiber.HeaderXForwardedFor), []byte(ip))
	}
	h.SetCanonical([]byte("X-Real-Ip"), []byte(ip))
	if len(secret) > 0 {
		h.SetCanonical([]byte(contract.InternalSecretHeader), secret)
	} else {
		h.Del(contract.InternalSecretHeader)
	}
	proto := "http"
	switch {
	case c.Context().IsTLS():
		proto = "https"
	case trusted: // the proxy in front says how the client connected
		if p := h.Peek(fiber.HeaderXForwardedProto); string(p) == "https" {
			proto = "https"
		}
	}
	h.SetCanonical([]byte(fiber.HeaderXForwardedProto), []byte(proto))
	h.SetCanonical([]byte(fiber.HeaderXForwardedHost), c.Request().Host())
}

// UnreachableRetryAfter is the Retry-After of the 503 the gateway answers when a service cannot
// be reached or is at capacity: a service restarting (a deploy, a crash) is back within seconds,
// and a client that waits this long and retries with the same Idempotency-Key loses nothing.
const UnreachableRetryAfter = "1"

// upstreamProblem is the gateway's answer for a request the upstream did not answer: 504 when it
// was too slow, 503 with Retry-After when it could not be reached or had no free connection
// (nothing was done, so the request is safe to retry). 502 is left for an answer the gateway
// cannot relay (larger than maxUpstreamBody).
func upstreamProblem(name string, err error) *problem.Problem {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), isTimeout(err):
		return problem.New(fiber.StatusGatewayTimeout, "the "+name+" service did not answer in time")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return problem.New(fiber.StatusBadGateway, "the "+name+" service's answer was too large to relay")
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return problem.Unavailable.New("the "+name+" service is at capacity; retry shortly").
			WithHeader(fiber.HeaderRetryAfter, UnreachableRetryAfter)
	default:
		return problem.Unavailable.New("the "+name+" service is unreachable; retry shortly").
			WithHeader(fiber.HeaderRetryAfter, UnreachableRetryAfter)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || strings.Contains(err.Error(), "timeout")
}

// retryAfterSeconds formats a wait for the Retry-After header: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
