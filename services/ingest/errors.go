package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/obsops/obsops/pkg/problem"
)

// ConflictError is a write the current state forbids (409); its text is the problem's detail.
// RetryAfter, when set, is sent as Retry-After (a request still in progress under the same key).
type ConflictError struct {
	Msg        string
	RetryAfter int
}

func (e *ConflictError) Error() string { return e.Msg }

// ProblemKind makes it a 409 (problem.Kinded).
func (e *ConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// GetHeaders is the Retry-After of a conflict that resolves by itself (huma sends it).
func (e *ConflictError) GetHeaders() http.Header {
	if e.RetryAfter == 0 {
		return nil
	}
	return http.Header{"Retry-After": {strconv.Itoa(e.RetryAfter)}}
}

// UnavailableError is a write or read the buffer or the database cannot take now (503 with
// Retry-After): nothing was recorded.
type UnavailableError struct {
	What       string // what is unavailable
	RetryAfter int    // seconds
}

func (e *UnavailableError) Error() string {
	return e.What + "; nothing was recorded, retry after the indicated delay"
}

// ProblemKind makes it a 503 (problem.Kinded).
func (e *UnavailableError) ProblemKind() problem.Kind { return problem.Unavailable }

// GetHeaders is its Retry-After (huma sends it).
func (e *UnavailableError) GetHeaders() http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(e.RetryAfter)}}
}

// notFoundError is a 404 whose text is the whole detail ("no raw data file <id>").
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return problem.ErrNotFound }

func notFound(msg string) error { return &notFoundError{msg} }

// errDatabase wraps a database failure while validating references.
var errDatabase = errors.New("database unavailable")

func dbErr(err error) error { return fmt.Errorf("%w: %v", errDatabase, err) }

func conflict(msg string) error { return &ConflictError{Msg: msg} }

// IdempotencyLimitError is an Idempotency-Key refused because its user already holds Limit
// unexpired keys (OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL): 429 with Retry-After, when the
// oldest of them expires. Nothing was recorded; the same request without a key, or with a
// client-chosen id, is not limited this way.
type IdempotencyLimitError struct {
	Limit      int
	RetryAfter int // seconds
}

func (e *IdempotencyLimitError) Error() string {
	return "this user holds " + strconv.Itoa(e.Limit) + " unexpired Idempotency-Keys, the most kept per credential " +
		"(OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL); nothing was recorded: retry after the indicated delay, " +
		"or send the request without a key (a client-chosen id keeps a retry safe)"
}

// ProblemKind makes it a 429 (problem.Kinded).
func (e *IdempotencyLimitError) ProblemKind() problem.Kind { return problem.RateLimited }

// GetHeaders is its Retry-After (huma sends it).
func (e *IdempotencyLimitError) GetHeaders() http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(e.RetryAfter)}}
}
