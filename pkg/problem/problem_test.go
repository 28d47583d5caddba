package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
)

// TestVocabulary: every kind has its own type URI, a title, and an error status; the general kind
// of a status is the first of its status.
func TestVocabulary(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range problem.Kinds() {
		require.True(t, strings.HasPrefix(k.Type(), "urn:obsops:problem:"), k)
		require.False(t, seen[k.Type()], "type %s twice", k.Type())
		seen[k.Type()] = true
		require.NotEmpty(t, k.Title(), k)
		require.GreaterOrEqual(t, k.Status(), 400, k)
		p := k.New("x")
		require.Equal(t, k, p.Kind())
		require.Equal(t, k.Status(), p.Status)
	}
	require.Equal(t, problem.Forbidden, problem.KindOf(403))
	require.Equal(t, problem.RateLimited, problem.KindOf(429))
	require.Equal(t, problem.Invalid, problem.KindOf(422))
	require.Equal(t, problem.BadRequest, problem.KindOf(418), "an unknown 4xx")
	require.Equal(t, problem.Internal, problem.KindOf(599), "an unknown 5xx")
}

// TestInternalNeverCarriesItsCause: an internal problem's detail is the generic one, whatever the
// caller wrote; the cause stays for the log.
func TestInternalNeverCarriesItsCause(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.5:5432: connection refused")
	for _, p := range []*problem.Problem{
		problem.Internal.New("dial tcp 10.0.0.5:5432").WithCause(cause),
		problem.New(500, "pq: relation users does not exist"),
		problem.From(cause),
		problem.From(fmt.Errorf("wrapped: %w", cause)),
	} {
		require.Equal(t, 500, p.Status)
		require.Equal(t, problem.Internal.Type(), p.Type)
		require.NotContains(t, p.Detail, "10.0.0.5")
		require.NotContains(t, p.Detail, "pq:")
	}
	require.ErrorIs(t, problem.From(cause), cause)
	require.Equal(t, cause, problem.Cause(cause))
	require.Nil(t, problem.Cause(problem.NotFound.New("no such thing")))
	require.Nil(t, problem.Cause(fiber.ErrNotFound))

	wrapped := fmt.Errorf("ctx: %w", problem.Conflict.New("busy"))
	require.Equal(t, problem.Conflict, problem.From(wrapped).Kind(), "a wrapped problem is kept")
	require.Equal(t, problem.MethodNotAllowed, problem.From(fiber.ErrMethodNotAllowed).Kind())
	require.Equal(t, "", problem.From(fiber.NewError(400, "Cannot GET /secret?token=abc")).Detail,
		"Fiber's own message (it may echo the request) is not taken")
}

// TestHumaErrorsAreProblems: after InstallHuma, huma's helpers and its validation errors are
// problems of the vocabulary, and validation names the field.
func TestHumaErrorsAreProblems(t *testing.T) {
	problem.InstallHuma()
	e := huma.Error404NotFound("source 7 not found")
	p, ok := e.(*problem.Problem)
	require.True(t, ok)
	require.Equal(t, problem.NotFound, p.Kind())
	require.Equal(t, "source 7 not found", p.Detail)

	v := huma.NewError(422, "validation failed", &huma.ErrorDetail{Message: "expected number >= 1", Location: "query.limit", Value: 0})
	p = v.(*problem.Problem)
	require.Equal(t, problem.Invalid, p.Kind())
	require.Equal(t, "query.limit", p.Errors[0].Location)
	require.Contains(t, p.Detail, "query.limit: expected number >= 1")

	internal := huma.NewError(500, "unexpected error occurred", errors.New("redis: 10.1.1.1:6379 refused"))
	p = internal.(*problem.Problem)
	require.Equal(t, problem.Internal, p.Kind())
	require.NotContains(t, p.Detail, "10.1.1.1")
	require.Contains(t, problem.Cause(p).Error(), "10.1.1.1")

	require.Equal(t, "application/problem+json", p.ContentType("application/json"))
	withHeader := problem.RateLimited.New("slow down").WithHeader("Retry-After", "3")
	require.Equal(t, "3", withHeader.GetHeaders().Get("Retry-After"))
}

// TestErrorBodiesAreBounded: a request with tens of thousands of mistakes, each of which huma
// reports with the whole decoded body as its value, gets an answer of a few kilobytes that lists
// MaxErrors of them, counts the rest, and echoes no value longer than an excerpt.
func TestErrorBodiesAreBounded(t *testing.T) {
	problem.InstallHuma()
	body := map[string]any{}
	for i := range 60000 {
		body[fmt.Sprintf("unknown_key_%05d", i)] = strings.Repeat("x", 4)
	}
	var errs []error
	for i := range 60000 {
		errs = append(errs, &huma.ErrorDetail{Location: fmt.Sprintf("body.unknown_key_%05d", i), Message: "unexpected property", Value: body})
	}
	err := huma.NewError(422, "validation failed", errs...)
	var p *problem.Problem
	require.ErrorAs(t, err, &p)
	out, jerr := json.Marshal(p)
	require.NoError(t, jerr)
	require.Less(t, len(out), 16<<10, "the answer stays small")
	require.Len(t, p.Errors, problem.MaxErrors)
	require.Equal(t, 60000-problem.MaxErrors, p.ErrorsOmitted)
	require.Contains(t, p.Detail, "59980 more not listed")
	require.Equal(t, "object with 60000 properties", p.Errors[0].Value)
	require.Equal(t, "body.unknown_key_00000", p.Errors[0].Location, "the first errors are the ones listed")

	// a problem made by hand is bounded when it is sent, too
	many := make([]problem.Detail, 100)
	for i := range many {
		many[i] = problem.Detail{Location: "body.x", Message: "bad", Value: strings.Repeat("é", 1000)}
	}
	app := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler})
	app.Get("/", func(c *fiber.Ctx) error { return problem.Invalid.New(strings.Repeat("d", 100000), many...) })
	resp, terr := app.Test(httptest.NewRequest("GET", "/", nil))
	require.NoError(t, terr)
	var sent problem.Problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sent))
	require.Len(t, sent.Errors, problem.MaxErrors)
	require.Equal(t, 80, sent.ErrorsOmitted)
	require.LessOrEqual(t, len(sent.Detail), problem.MaxDetailBytes+len("…"))
	v := sent.Errors[0].Value.(string)
	require.LessOrEqual(t, len(v), problem.MaxValueBytes+len("…"))
	require.True(t, utf8.ValidString(v), "cut at a rune boundary")
}

// TestExcerpt: scalars as they are, long strings cut, short lists of scalars kept, anything
// structured or long described by its size.
func TestExcerpt(t *testing.T) {
	require.Equal(t, 3.5, problem.Excerpt(3.5))
	require.Equal(t, true, problem.Excerpt(true))
	require.Nil(t, problem.Excerpt(nil))
	require.Equal(t, "abc", problem.Excerpt("abc"))
	require.Equal(t, strings.Repeat("a", problem.MaxValueBytes)+"…", problem.Excerpt(strings.Repeat("a", 1000)))
	require.Equal(t, []any{int64(1), int64(2)}, problem.Excerpt([]int64{1, 2}))
	require.Equal(t, "array of 11 items", problem.Excerpt(make([]int, 11)))
	require.Equal(t, "array of 1 items", problem.Excerpt([]any{map[string]any{"a": 1}}))
	require.Equal(t, "object with 2 properties", problem.Excerpt(map[string]any{"a": 1, "b": 2}))
	n := 7
	require.Equal(t, 7, problem.Excerpt(&n))
}

// conflictErr is a domain error that knows its kind.
type conflictErr struct{ id int }

func (e conflictErr) Error() string             { return fmt.Sprintf("operation %d is COMPLETED", e.id) }
func (e conflictErr) ProblemKind() problem.Kind { return problem.Conflict }

// TestDomainErrors: the errors a domain package returns become problems of their kind — through
// From and through huma's hook for a handler's plain error — and anything else stays internal.
func TestDomainErrors(t *testing.T) {
	problem.InstallHuma()
	cases := []struct {
		err    error
		kind   problem.Kind
		detail string
	}{
		{problem.Field("body.end_time", "must not be before start_time", "04:00"), problem.Invalid, "body.end_time: must not be before start_time"},
		{errors.Join(problem.Field("body.a", "bad", 1), fmt.Errorf("x: %w", problem.Field("body.b", "worse", 2))), problem.Invalid, "body.a: bad; body.b: worse"},
		{fmt.Errorf("program 7: %w", problem.ErrNotFound), problem.NotFound, "program 7: not found"},
		{fmt.Errorf("reset: %w", conflictErr{3}), problem.Conflict, "operation 3 is COMPLETED"},
	}
	for _, tc := range cases {
		for via, p := range map[string]*problem.Problem{
			"From": problem.From(tc.err),
			"huma": huma.NewError(500, "unexpected error occurred", tc.err).(*problem.Problem),
		} {
			require.Equal(t, tc.kind, p.Kind(), "%s: %v", via, tc.err)
			require.Contains(t, p.Detail, tc.detail, via)
			require.Nil(t, problem.Cause(p), "%s: a domain error is no internal error", via)
		}
	}
	p := problem.From(errors.Join(problem.Field("body.a", "bad", 1), problem.Field("body.b", "bad", 2)))
	require.Len(t, p.Errors, 2)
	require.Equal(t, "body.b", p.Errors[1].Location)
	plain := errors.New("pq: deadlock detected")
	require.Equal(t, problem.Internal, problem.From(plain).Kind())
	require.Equal(t, problem.Internal, huma.NewError(500, "unexpected error occurred", plain).(*problem.Problem).Kind())
}
