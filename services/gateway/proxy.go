package gateway

import (
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// Upstream is one service behind the gateway and the pooled client that reaches it.
type Upstream struct {
	Name        string
	Addr        string // host:port
	pool        *Pipeline
	tls         bool
	scheme      string
	timeout     time.Duration
	dialTimeout time.Duration
	tunnels     *Tunnels
	metrics     *Metrics
}

// PipelineSettings bound how requests may share upstream connections (see Pipeline).
type PipelineSettings struct {
	Depth      int
	JoinWindow time.Duration
}

// NewUpstream parses baseURL (http://host:port) and prepares a connection pool to it. WebSocket
// upgrades are tunnelled and registered with tunnels, so shutdown can close them.
func NewUpstream(name, baseURL string, timeout, dialTimeout time.Duration, pipe PipelineSettings,
	tunnels *Tunnels, m *Metrics) (*Upstream, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	isTLS := u.Scheme == "https"
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if isTLS {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	up := &Upstream{
		Name:        name,
		Addr:        addr,
		tls:         isTLS,
		scheme:      u.Scheme,
		timeout:     timeout,
		dialTimeout: dialTimeout,
		tunnels:     tunnels,
		metrics:     m,
	}
	up.pool = NewPipeline(PipelineOptions{
		Dial:       up.dial,
		Depth:      pipe.Depth,
		JoinWindow: pipe.JoinWindow,
		MaxConns:   2048,
		IdleFor:    90 * time.Second,
		// Timeouts may fire up to a tenth (at most a second) late, which spares a timer update
		// per request.
		TimeoutSlack: min(time.Second, timeout/10),
		Pipelined:    m.pipelined.WithLabelValues(name).Inc,
		Wrote:        m.upstreamWrites.WithLabelValues(name).Inc,
	})
	return up, nil
}

// Hop-by-hop headers are connection-scoped and never forwarded (RFC 9110 §7.6.1).
const (
	hopConnection = 1 << iota
	hopKeepAlive
	hopProxyAuthenticate
	hopProxyAuthorization
	hopTE
	hopTrailer
	hopTransferEncoding
	hopUpgrade
)

// hopBit classifies a (normalized) header name; 0 for end-to-end headers.
func hopBit(k []byte) int {
	switch string(k) {
	case "Connection":
		return hopConnection
	case "Keep-Alive":
		return hopKeepAlive
	case "Proxy-Authenticate":
		return hopProxyAuthenticate
	case "Proxy-Authorization":
		return hopProxyAuthorization
	case "Te":
		return hopTE
	case "Trailer":
		return hopTrailer
	case "Transfer-Encoding":
		return hopTransferEncoding
	case "Upgrade":
		return hopUpgrade
	}
	return 0
}

// stripHop deletes the hop-by-hop headers present in one pass over the headers (deleting each
// name blindly costs more than the whole scan on this hot path).
func stripHop(present int, del func(string)) {
	if present == 0 {
		return
	}
	names := [...]string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}
	for i, name := range names {
		if present&(1<<i) != 0 {
			del(name)
		}
	}
}

// Forward relays the request to the upstream and its answer back; a WebSocket upgrade is
// tunnelled instead. A refused connection is a 502, an exhausted pool a 503 and a slow upstream
// a 504, each as problem+json and quickly.
func (u *Upstream) Forward(c *fiber.Ctx) error {
	req := c.Request()
	if isWebSocketUpgrade(req) {
		return u.tunnel(c)
	}
	clientClose := req.Header.ConnectionClose()
	present := 0
	for k := range req.Header.All() {
		present |= hopBit(k)
	}
	stripHop(present, req.Header.Del)
	setForwardedHeaders(c)
	req.SetHost(u.Addr)

	resp := c.Response()
	if err := u.pool.Do(req, resp, u.timeout); err != nil {
		resp.Reset()
		return u.fail(err)
	}
	present = 0
	for k := range resp.Header.All() {
		present |= hopBit(k)
	}
	stripHop(present, resp.Header.Del)
	resp.Header.Del(fiber.HeaderServer)
	if clientClose { // the client's wish about its own connection, not the upstream's
		resp.SetConnectionClose()
	}
	// The services echo the id; an upstream that does not must not break "request id out".
	resp.Header.SetCanonical([]byte("X-Request-Id"), []byte(service.RequestID(c)))
	return nil
}

// Close closes the connections to the upstream (after the gateway stopped serving).
func (u *Upstream) Close() { u.pool.Close() }

// fail turns a transport error into the gateway's problem and counts it.
func (u *Upstream) fail(err error) *problem.Problem {
	p := upstreamProblem(u.Name, err)
	u.metrics.upstreamErrors.WithLabelValues(u.Name, strconv.Itoa(p.Status)).Inc()
	return p
}

// dial opens a raw connection to the upstream (WebSocket tunnels).
func (u *Upstream) dial() (net.Conn, error) {
	if u.tls {
		host, _, _ := net.SplitHostPort(u.Addr)
		d := &net.Dialer{Timeout: u.dialTimeout}
		return tls.DialWithDialer(d, "tcp", u.Addr, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	}
	return fasthttp.DialTimeout(u.Addr, u.dialTimeout)
}

// setForwardedHeaders tells the service who the client is (the gateway is a trusted proxy).
// The names are given in canonical form, which spares fasthttp normalizing them per request.
func setForwardedHeaders(c *fiber.Ctx) {
	h := &c.Request().Header
	ip := service.ClientIP(c)
	trusted := service.FromTrustedProxy(c)
	if prior := h.Peek(fiber.HeaderXForwardedFor); len(prior) > 0 && trusted {
		h.SetCanonical([]byte(fiber.HeaderXForwardedFor), []byte(string(prior)+", "+ip))
	} else {
		h.SetCanonical([]byte(fiber.HeaderXForwardedFor), []byte(ip))
	}
	h.SetCanonical([]byte("X-Real-Ip"), []byte(ip))
	proto := "http" // what c.Protocol() answers for a plain connection from an untrusted client
	if trusted || c.Context().IsTLS() {
		proto = c.Protocol()
	}
	h.SetCanonical([]byte(fiber.HeaderXForwardedProto), []byte(proto))
	h.SetCanonical([]byte(fiber.HeaderXForwardedHost), c.Request().Host())
}

func upstreamProblem(name string, err error) *problem.Problem {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), isTimeout(err):
		return problem.New(fiber.StatusGatewayTimeout, "the "+name+" service did not answer in time")
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return problem.New(fiber.StatusServiceUnavailable, "the "+name+" service is at capacity; retry shortly")
	default:
		return problem.New(fiber.StatusBadGateway, "the "+name+" service is unreachable")
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
