// Package problem is the one error vocabulary of obsops and the one place that turns an error
// into an RFC 9457 problem+json answer.
//
// Every error of every binary is a *Problem of one Kind (invalid, not_found, conflict, ...): the
// kind fixes the HTTP status, the title and the `type` URI (urn:obsops:problem:<kind>, listed in
// docs/api.md). Handlers return problems (Kind.New, or huma's Error4xx helpers, which InstallHuma
// routes here); the router's own errors (404, 405), the server's (400 for a malformed request,
// 413, 431), panics and errors that are not problems are turned into problems by ErrorHandler,
// ServerErrorHandler and huma's hooks, all through From. An error that is not a problem is an
// internal error: the client gets a generic 500 and the cause goes to the log, never to the
// client.
package problem

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// ContentType is the media type of every problem response.
const ContentType = "application/problem+json"

// TypePrefix begins every problem type URI; the kind follows it.
const TypePrefix = "urn:obsops:problem:"

// Kind is one class of error of the obsops vocabulary. Its string is the last part of the
// problem's type URI.
type Kind string

// The vocabulary. Each kind has one status (Kind.Status) and title (Kind.Title).
const (
	BadRequest            Kind = "bad_request"              // 400: the request cannot be parsed (malformed syntax, JSON or header)
	Unauthenticated       Kind = "unauthenticated"          // 401: no valid credential (with WWW-Authenticate)
	Forbidden             Kind = "forbidden"                // 403: authenticated, but not allowed
	InsufficientScope     Kind = "insufficient_scope"       // 403: an API token without the scope the route needs
	NotFound              Kind = "not_found"                // 404: no such route or object (or not yours)
	MethodNotAllowed      Kind = "method_not_allowed"       // 405: the route exists for other methods (see Allow)
	NotAcceptable         Kind = "not_acceptable"           // 406: no representation the client accepts
	RequestTimeout        Kind = "request_timeout"          // 408: the client was too slow sending its request
	Conflict              Kind = "conflict"                 // 409: the request conflicts with the current state
	WriteAtMainSite       Kind = "write_at_main_site"       // 409: a change a secondary site does not make: make it at the main site
	PreconditionFailed    Kind = "precondition_failed"      // 412: a conditional request's precondition failed
	PayloadTooLarge       Kind = "payload_too_large"        // 413: the body exceeds the limit
	UnsupportedMediaType  Kind = "unsupported_media_type"   // 415: a body of a type the route does not take
	Invalid               Kind = "invalid"                  // 422: well-formed but invalid input; errors[] names the fields
	RateLimited           Kind = "rate_limited"             // 429: over the request rate limit (with Retry-After)
	TooManyFailedAttempts Kind = "too_many_failed_attempts" // 429: too many failed authentications from this address (with Retry-After)
	HeadersTooLarge       Kind = "headers_too_large"        // 431: the request's header block exceeds the server's buffer
	Internal              Kind = "internal"                 // 500: a fault of the service; details only in its log
	NotImplemented        Kind = "not_implemented"          // 501: the method is not implemented
	BadGateway            Kind = "bad_gateway"              // 502: the gateway could not reach the service
	Unavailable           Kind = "unavailable"              // 503: temporarily unavailable (a dependency down, at capacity, shutting down)
	GatewayTimeout        Kind = "gateway_timeout"          // 504: the service did not answer the gateway in time
)

// Kinds lists the whole vocabulary, in status order (for documentation and tests).
func Kinds() []Kind {
	return []Kind{BadRequest, Unauthenticated, Forbidden, InsufficientScope, NotFound, MethodNotAllowed,
		NotAcceptable, RequestTimeout, Conflict, WriteAtMainSite, PreconditionFailed, PayloadTooLarge, UnsupportedMediaType,
		Invalid, RateLimited, TooManyFailedAttempts, HeadersTooLarge, Internal, NotImplemented, BadGateway,
		Unavailable, GatewayTimeout}
}

type kindInfo struct {
	status int
	title  string
}

func (k Kind) info() kindInfo {
	switch k {
	case BadRequest:
		return kindInfo{http.StatusBadRequest, "Bad request"}
	case Unauthenticated:
		return kindInfo{http.StatusUnauthorized, "Authentication required"}
	case Forbidden:
		return kindInfo{http.StatusForbidden, "Forbidden"}
	case InsufficientScope:
		return kindInfo{http.StatusForbidden, "Insufficient scope"}
	case NotFound:
		return kindInfo{http.StatusNotFound, "Not found"}
	case MethodNotAllowed:
		return kindInfo{http.StatusMethodNotAllowed, "Method not allowed"}
	case NotAcceptable:
		return kindInfo{http.StatusNotAcceptable, "Not acceptable"}
	case RequestTimeout:
		return kindInfo{http.StatusRequestTimeout, "Request timeout"}
	case Conflict:
		return kindInfo{http.StatusConflict, "Conflict"}
	case WriteAtMainSite:
		return kindInfo{http.StatusConflict, "Write at the main site"}
	case PreconditionFailed:
		return kindInfo{http.StatusPreconditionFailed, "Precondition failed"}
	case PayloadTooLarge:
		return kindInfo{http.StatusRequestEntityTooLarge, "Payload too large"}
	case UnsupportedMediaType:
		return kindInfo{http.StatusUnsupportedMediaType, "Unsupported media type"}
	case Invalid:
		return kindInfo{http.StatusUnprocessableEntity, "Invalid input"}
	case RateLimited:
		return kindInfo{http.StatusTooManyRequests, "Rate limit exceeded"}
	case TooManyFailedAttempts:
		return kindInfo{http.StatusTooManyRequests, "Too many failed attempts"}
	case HeadersTooLarge:
		return kindInfo{http.StatusRequestHeaderFieldsTooLarge, "Request headers too large"}
	case NotImplemented:
		return kindInfo{http.StatusNotImplemented, "Not implemented"}
	case BadGateway:
		return kindInfo{http.StatusBadGateway, "Service unreachable"}
	case Unavailable:
		return kindInfo{http.StatusServiceUnavailable, "Service unavailable"}
	case GatewayTimeout:
		return kindInfo{http.StatusGatewayTimeout, "Service timeout"}
	}
	return kindInfo{http.StatusInternalServerError, "Internal error"}
}

// Status is the HTTP status of the kind.
func (k Kind) Status() int { return k.info().status }

// Title is the short summary shared by every problem of the kind.
func (k Kind) Title() string { return k.info().title }

// Type is the kind's problem type URI, urn:obsops:problem:<kind>.
func (k Kind) Type() string { return TypePrefix + string(k) }

// New returns a problem of kind k explaining this occurrence in detail. Problems of kind Internal
// always carry the generic detail (see Internal); give the cause with WithCause.
func (k Kind) New(detail string, errs ...Detail) *Problem {
	if k.Status() == http.StatusInternalServerError {
		k, detail = Internal, internalDetail
	}
	return &Problem{Type: k.Type(), Title: k.Title(), Status: k.Status(), Detail: detail, Errors: errs}
}

// KindOf returns the kind a status stands for when nothing more specific is known: the most
// general kind with that status, Internal for unknown 5xx and BadRequest for unknown 4xx.
func KindOf(status int) Kind {
	for _, k := range Kinds() {
		if k.Status() == status {
			return k // the first of equal statuses is the general one (Forbidden before InsufficientScope, ...)
		}
	}
	if status == http.StatusUnprocessableEntity {
		return Invalid
	}
	if status >= 400 && status < 500 {
		return BadRequest
	}
	return Internal
}

// internalDetail is all a client learns about an internal error.
const internalDetail = "internal error; the service log has the details under this response's X-Request-Id"

// Detail names one offending input, e.g. {"location": "body.scopes[1]", "message": "unknown scope"}.
type Detail struct {
	Message  string `json:"message,omitempty" doc:"What is wrong with this input."`
	Location string `json:"location,omitempty" doc:"Where the input is, e.g. body.scopes[1], query.limit, path.id."`
	Value    any    `json:"value,omitempty" doc:"The offending value, when it helps."`
}

// Problem is an RFC 9457 problem document, and an error that handlers return.
type Problem struct {
	Type     string   `json:"type" doc:"The problem type: urn:obsops:problem:<kind> (see docs/api.md for the list)."`
	Title    string   `json:"title" doc:"Short summary of the problem type."`
	Status   int      `json:"status" doc:"HTTP status code."`
	Detail   string   `json:"detail" doc:"What went wrong in this request."`
	Instance string   `json:"instance" doc:"The request path this problem occurred at; X-Request-Id identifies the request."`
	Errors   []Detail `json:"errors,omitempty" doc:"The offending inputs, for invalid requests: at most 20, in input order."`
	// ErrorsOmitted counts the offending inputs not listed in Errors (see MaxErrors).
	ErrorsOmitted int `json:"errors_omitted,omitempty" doc:"How many more offending inputs there were than errors lists (it lists at most 20)."`

	headers http.Header // extra response headers: Retry-After, WWW-Authenticate, Allow
	cause   error       // why, for the log only
}

// New returns a problem of the kind status stands for (KindOf). Prefer Kind.New.
func New(status int, detail string) *Problem {
	p := KindOf(status).New(detail)
	p.Status = status // e.g. a 418 stays a 418, of kind bad_request
	return p
}

// Error makes *Problem an error.
func (p *Problem) Error() string {
	s := strconv.Itoa(p.Status) + " " + p.Title + ": " + p.Detail
	if p.cause != nil {
		s += ": " + p.cause.Error()
	}
	return s
}

// Unwrap returns the cause given with WithCause.
func (p *Problem) Unwrap() error { return p.cause }

// WithCause records why the problem happened, for the log; the client never sees it.
func (p *Problem) WithCause(err error) *Problem { p.cause = err; return p }

// WithHeader adds a response header sent with the problem (Retry-After, WWW-Authenticate, ...).
func (p *Problem) WithHeader(name, value string) *Problem {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	p.headers.Add(name, value)
	return p
}

// Kind is the problem's kind, read from its type (KindOf its status for a foreign type).
func (p *Problem) Kind() Kind {
	if k, ok := strings.CutPrefix(p.Type, TypePrefix); ok {
		return Kind(k)
	}
	return KindOf(p.Status)
}

// GetStatus is the problem's HTTP status (huma.StatusError).
func (p *Problem) GetStatus() int { return p.Status }

// GetHeaders are the extra response headers (huma.HeadersError).
func (p *Problem) GetHeaders() http.Header {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	return p.headers
}

// ContentType maps the negotiated type to the problem variant (huma.ContentTypeFilter).
func (p *Problem) ContentType(ct string) string {
	if ct == "application/cbor" {
		return "application/problem+cbor"
	}
	return ContentType
}

// forRequest returns the problem as sent for a request at path: a copy (a problem value may be
// shared, e.g. a package-level error) with the instance set, a known type, and its bounds kept
// (bounded: a few kilobytes whatever the request held).
func (p *Problem) forRequest(path string) *Problem {
	cp := *p
	cp.Errors = append([]Detail(nil), p.Errors...)
	cp.bounded()
	if cp.Instance == "" {
		cp.Instance = path
	}
	if cp.Type == "" || cp.Type == "about:blank" {
		cp.Type = KindOf(cp.Status).Type()
	}
	if cp.Title == "" {
		cp.Title = KindOf(cp.Status).Title()
	}
	if cp.Detail == "" {
		cp.Detail = cp.Title
	}
	return &cp
}

// From turns any error into the problem to answer with: a *Problem (also wrapped) as it is, a
// Fiber error by its status with a fixed detail (Fiber's own messages may echo the request), a
// domain error (FieldError, ErrNotFound, Kinded: domain.go) by its kind, anything else an
// Internal problem carrying err as its cause.
func From(err error) *Problem {
	var p *Problem
	var fe *fiber.Error
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &fe):
		return New(fe.Code, "")
	}
	if d := fromDomain(err); d != nil {
		return d
	}
	return Internal.New("").WithCause(err)
}

// Write sends p for the request c with its status, headers and the problem content type.
func Write(c *fiber.Ctx, p *Problem) error {
	if p.Detail == "" {
		cp := *p
		cp.Detail = fiberDetail(c, p.Status)
		p = &cp
	}
	p = p.forRequest(c.Path())
	b, err := c.App().Config().JSONEncoder(p)
	if err != nil {
		return err
	}
	for name, values := range p.headers {
		for _, v := range values {
			c.Set(name, v)
		}
	}
	c.Status(p.Status)
	c.Set(fiber.HeaderContentType, ContentType)
	return c.Send(b)
}

// ErrorHandler is the Fiber error handler of every obsops app (see From). Internal errors are
// answered without their cause; the chassis logs it (Cause).
func ErrorHandler(c *fiber.Ctx, err error) error {
	p := From(err)
	if p.Status == fiber.StatusMethodNotAllowed && p.headers.Get(fiber.HeaderAllow) == "" {
		if allow := allowedMethods(c); len(allow) > 0 {
			c.Set(fiber.HeaderAllow, strings.Join(allow, ", "))
		}
	}
	return Write(c, p)
}

// Cause returns the internal cause behind err when err is (or will become) an Internal problem,
// for the log; nil otherwise.
func Cause(err error) error {
	var p *Problem
	if errors.As(err, &p) {
		return p.cause
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return nil
	}
	return err
}

// fiberDetail explains the statuses Fiber answers by itself, without echoing the request.
func fiberDetail(c *fiber.Ctx, status int) string {
	switch status {
	case fiber.StatusNotFound:
		return "no route for " + c.Method() + " " + c.Path()
	case fiber.StatusMethodNotAllowed:
		return "method " + c.Method() + " is not allowed on " + c.Path()
	case fiber.StatusRequestEntityTooLarge:
		return "request body exceeds the limit of " + strconv.Itoa(c.App().Config().BodyLimit) + " bytes"
	case fiber.StatusRequestTimeout:
		return "the request was not received in time"
	case fiber.StatusRequestHeaderFieldsTooLarge:
		return "the request headers are too large"
	}
	if status >= 500 {
		return internalDetail
	}
	return "the request could not be processed"
}

// allowedMethods lists the methods registered for the request's exact (static) path.
func allowedMethods(c *fiber.Ctx) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range c.App().GetRoutes(true) {
		if r.Path == c.Path() && !seen[r.Method] {
			seen[r.Method] = true
			out = append(out, r.Method)
		}
	}
	return out
}
