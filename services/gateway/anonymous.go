package gateway

import (
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// AnonymousBodies bounds what a request without a credential may send: anyone on the network can
// send such a request, and before this bound one anonymous client could make the gateway read
// 16 MiB bodies (the bulk route's limit) that the service then refused with 401. The server asks
// HeaderReceived for each request's limit once its headers are in, so a larger body is refused
// before it is read; Reject then answers 401 where the route needs a credential (the caller
// lacks one, whatever its body), else the 413.
type AnonymousBodies struct {
	Limit int // OPS_ANONYMOUS_BODY_LIMIT_BYTES
}

// HeaderReceived is the fasthttp server's per-request hook: a request without an Authorization
// header gets Limit as its body limit; any other keeps the server's.
func (a AnonymousBodies) HeaderReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if len(h.Peek(fasthttp.HeaderAuthorization)) == 0 {
		return fasthttp.RequestConfig{MaxRequestBodySize: a.Limit}
	}
	return fasthttp.RequestConfig{}
}

// Reject is the gateway's answer to a request the server refused before routing it, for
// service.SetRejectAnswer: a body over Limit without a credential gets 401 on a route that needs
// one and 413 naming Limit elsewhere; anything else keeps the chassis' answer (nil).
func (a AnonymousBodies) Reject(h *fasthttp.RequestHeader, err error) *problem.Problem {
	if !errors.Is(err, fasthttp.ErrBodyTooLarge) || len(h.Peek(fasthttp.HeaderAuthorization)) > 0 {
		return nil
	}
	if authn.NeedsCredential(string(h.Method()), string(h.RequestURI()[:pathLen(h.RequestURI())])) {
		return problem.Unauthenticated.New("a bearer credential (session JWT or API token) is required").
			WithHeader(fasthttp.HeaderWWWAuthenticate, `Bearer realm="obsops"`)
	}
	return problem.PayloadTooLarge.New("a request without a credential may send at most " + strconv.Itoa(a.Limit) + " bytes")
}

// pathLen is the length of the path part of a request URI (up to ? or #).
func pathLen(uri []byte) int {
	for i, b := range uri {
		if b == '?' || b == '#' {
			return i
		}
	}
	return len(uri)
}
