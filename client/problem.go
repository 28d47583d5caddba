package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Problem is an RFC 9457 problem+json answer as a Go error. Field is the first offending input
// the server named (e.g. body.files[3].checksum, query.radius), empty when none is.
type Problem struct {
	Status    int           `json:"status"`
	Type      string        `json:"type,omitempty"`
	Title     string        `json:"title"`
	Detail    string        `json:"detail"`
	Instance  string        `json:"instance,omitempty"`
	Errors    []ErrorDetail `json:"errors,omitempty"`
	RequestID string        `json:"-"` // X-Request-ID of the answer
	Field     string        `json:"-"`
}

// ErrorDetail is one offending input of a Problem.
type ErrorDetail struct {
	Location string `json:"location,omitempty"`
	Message  string `json:"message,omitempty"`
	Value    any    `json:"value,omitempty"`
}

// Error is "STATUS TITLE: DETAIL (FIELD: MESSAGE; …)".
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Title)
	if p.Detail != "" && p.Detail != p.Title {
		b.WriteString(": " + p.Detail)
	}
	var parts []string
	for _, e := range p.Errors {
		part := e.Message
		if e.Location != "" {
			part = e.Location + ": " + e.Message
		}
		// huma's detail often already says it ("validation failed: body.x: ..."): once is enough.
		if part != "" && !strings.Contains(p.Detail, part) && !strings.Contains(p.Detail, e.Message) {
			parts = append(parts, part)
		}
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}

// Check turns the outcome of a generated call into an error: a transport error becomes
// *Unreachable, an answer of 400 or more a *Problem (from its problem+json body, or made up from
// the status when the body is not one); 2xx and 3xx are nil.
func Check(resp *http.Response, body []byte, err error) error {
	if err != nil {
		if resp == nil {
			return &Unreachable{Err: err}
		}
		return err
	}
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	return ProblemFrom(resp, body)
}

// ProblemFrom reads the problem+json answer resp (whose body is body).
func ProblemFrom(resp *http.Response, body []byte) *Problem {
	p := &Problem{}
	if err := json.Unmarshal(body, p); err != nil || p.Status == 0 {
		p = &Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(body))}
		if len(p.Detail) > 300 {
			p.Detail = p.Detail[:300] + "…"
		}
	}
	p.RequestID = resp.Header.Get("X-Request-ID")
	for _, e := range p.Errors {
		if e.Location != "" {
			p.Field = e.Location
			break
		}
	}
	return p
}
