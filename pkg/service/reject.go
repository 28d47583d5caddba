package service

import (
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/obsops/obsops/pkg/problem"
)

// rejectRequest is the HTTP server's own error handler: it answers a request the server refused
// before any handler ran (a bad request line or header line, a header block larger than the
// read buffer, a body over the limit, a client too slow to send) with a short problem+json and
// closes the connection. It never echoes the request: the parser's error text quotes the raw
// request, bearer token included (Fiber's default handler sent that text back), so neither the
// answer nor the log carries it. The instance is the request id as a URN (the path may be what
// could not be parsed; a 413's is its path); the answer carries X-Request-Id like every other.
func rejectRequest(s *Service, bodyLimit int, m *httpMetrics) func(*fasthttp.RequestCtx, error) {
	log := s.Log
	return func(ctx *fasthttp.RequestCtx, err error) {
		var kind problem.Kind
		var detail string
		var netErr net.Error
		var own *problem.Problem
		if s.rejectAnswer != nil {
			own = s.rejectAnswer(&ctx.Request.Header, err)
		}
		switch {
		case own != nil:
			kind, detail = own.Kind(), own.Detail
		case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
			kind, detail = problem.HeadersTooLarge, "the request line or headers are too large"
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			kind, detail = problem.PayloadTooLarge, "request body exceeds the limit of "+strconv.Itoa(bodyLimit)+" bytes"
		case errors.As(err, &netErr) && netErr.Timeout(), strings.Contains(err.Error(), "timeout"):
			kind, detail = problem.RequestTimeout, "the request was not received in time"
		default:
			kind, detail = problem.BadRequest, "malformed HTTP request"
		}
		id := string(ctx.Request.Header.Peek(RequestIDHeader))
		if kind != problem.PayloadTooLarge || !validRequestID(id) { // only a 413's headers were read whole
			id = newRequestID()
		}
		p := kind.New(detail)
		if own != nil {
			p = own
		}
		p.Instance = "urn:obsops:request:" + id
		if kind == problem.PayloadTooLarge { // the request line and headers were parsed
			p.Instance = string(ctx.Path())
		}
		body, _ := json.Marshal(p)
		ctx.Response.Reset()
		ctx.SetStatusCode(p.Status)
		ctx.SetContentType(problem.ContentType)
		ctx.Response.Header.Set(RequestIDHeader, id)
		for name, values := range p.GetHeaders() {
			for _, v := range values {
				ctx.Response.Header.Add(name, v)
			}
		}
		ctx.SetBody(body)
		m.observe("OTHER", "rejected", p.Status, 0)
		log.Warn("request rejected", "request_id", id, "status", p.Status, "kind", string(kind),
			"client", ctx.RemoteIP().String())
	}
}

// SetRejectAnswer lets a server choose its own problem for a request refused before any handler
// ran (f returns nil to keep the chassis' answer): the gateway answers a body over its
// anonymous limit with 401 where the route needs a credential. Call it before Run.
func (s *Service) SetRejectAnswer(f func(header *fasthttp.RequestHeader, err error) *problem.Problem) {
	s.rejectAnswer = f
}
