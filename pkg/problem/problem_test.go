package problem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
