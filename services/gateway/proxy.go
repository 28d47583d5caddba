package gateway

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/problem"
)

// Upstream is one service behind the gateway and the pooled client that reaches it.
type Upstream struct {
	Name    string
	Addr    string // host:port
	client  *fasthttp.HostClient
	timeout time.Duration
}

// NewUpstream parses baseURL (http://host:port) and prepares a connection pool to it.
func NewUpstream(name, baseURL string, timeout, dialTimeout time.Duration) (*Upstream, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}
	return &Upstream{
		Name:    name,
		Addr:    addr,
		timeout: timeout,
		client: &fasthttp.HostClient{
			Addr:                     addr,
			IsTLS:                    u.Scheme == "https",
			MaxConns:                 2048,
			MaxIdleConnDuration:      90 * time.Second,
			ReadTimeout:              timeout,
			WriteTimeout:             timeout,
			NoDefaultUserAgentHeader: true,
			DisablePathNormalizing:   true,
			Dial: func(addr string) (net.Conn, error) {
				return fasthttp.DialTimeout(addr, dialTimeout)
			},
		},
	}, nil
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Forward relays the request to the upstream and its answer back. A refused connection is a
// 502, an exhausted pool a 503 and a slow upstream a 504, each as problem+json and quickly.
func (u *Upstream) Forward(c *fiber.Ctx) error {
	req := c.Request()
	resp := c.Response()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	setForwardedHeaders(c)
	req.SetHost(u.Addr)
	req.URI().SetScheme(map[bool]string{true: "https", false: "http"}[u.client.IsTLS])

	err := u.client.DoTimeout(req, resp, u.timeout)
	if err != nil {
		resp.Reset()
		return upstreamProblem(u.Name, err)
	}
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	resp.Header.Del(fiber.HeaderServer)
	return nil
}

// setForwardedHeaders tells the service who the client is (the gateway is a trusted proxy).
func setForwardedHeaders(c *fiber.Ctx) {
	h := &c.Request().Header
	ip := c.IP()
	if prior := string(h.Peek(fiber.HeaderXForwardedFor)); prior != "" && c.IsProxyTrusted() {
		h.Set(fiber.HeaderXForwardedFor, prior+", "+ip)
	} else {
		h.Set(fiber.HeaderXForwardedFor, ip)
	}
	h.Set("X-Real-IP", ip)
	h.Set(fiber.HeaderXForwardedProto, c.Protocol())
	h.Set(fiber.HeaderXForwardedHost, c.Hostname())
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
