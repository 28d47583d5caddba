// Package problem writes RFC 9457 problem details (application/problem+json).
//
// The shape matches huma's ErrorModel, so errors answered by Fiber itself (unknown route, wrong
// method, oversize body), by the gateway and by huma-validated handlers all look the same to a
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

// Detail names one offending input, e.g. {"location": "body.scopes[1]", "message": "unknown scope"}.
type Detail struct {
	Message  string `json:"message,omitempty"`
	Location string `json:"location,omitempty"`
	Value    any    `json:"value,omitempty"`
}

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type     string   `json:"type,omitempty"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Instance string   `json:"instance,omitempty"`
	Errors   []Detail `json:"errors,omitempty"`
}

// New returns a problem with the standard title for status.
func New(status int, detail string) *Problem {
	return &Problem{Title: http.StatusText(status), Status: status, Detail: detail}
}

// Write sends p with its status and the problem content type.
func Write(c *fiber.Ctx, p *Problem) error {
	if p.Instance == "" {
		p.Instance = c.Path()
	}
	b, err := c.App().Config().JSONEncoder(p)
	if err != nil {
		return err
	}
	c.Status(p.Status)
	c.Set(fiber.HeaderContentType, ContentType)
	return c.Send(b)
}

// ErrorHandler is the Fiber error handler of every obsops app: it turns any error that reaches
// Fiber (404 unknown route, 405, 413, timeouts, panics turned into errors) into problem+json and
// hides internal error text behind a generic 500.
func ErrorHandler(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	var p *Problem
	switch {
	case errors.As(err, &p):
	case errors.As(err, &fe):
		p = New(fe.Code, fiberDetail(c, fe))
	default:
		p = New(fiber.StatusInternalServerError, "internal error; see the service log with this request's X-Request-ID")
	}
	if p.Status == fiber.StatusMethodNotAllowed {
		if allow := allowedMethods(c); len(allow) > 0 {
			c.Set(fiber.HeaderAllow, strings.Join(allow, ", "))
		}
	}
	return Write(c, p)
}

// Error makes *Problem usable as an error returned from a Fiber handler.
func (p *Problem) Error() string { return strconv.Itoa(p.Status) + " " + p.Title + ": " + p.Detail }

func fiberDetail(c *fiber.Ctx, fe *fiber.Error) string {
	switch fe.Code {
	case fiber.StatusNotFound:
		return "no route for " + c.Method() + " " + c.Path()
	case fiber.StatusMethodNotAllowed:
		return "method " + c.Method() + " is not allowed on " + c.Path()
	case fiber.StatusRequestEntityTooLarge:
		return "request body exceeds the limit of " + strconv.Itoa(c.App().Config().BodyLimit) + " bytes"
	}
	return fe.Message
}

// allowedMethods lists the methods registered for the request's exact (static) path.
func allowedMethods(c *fiber.Ctx) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range c.App().GetRoutes(true) {
		if r.Path == c.Path() && !seen[r.Method] && r.Method != fiber.MethodHead {
			seen[r.Method] = true
			out = append(out, r.Method)
		}
	}
	return out
}
