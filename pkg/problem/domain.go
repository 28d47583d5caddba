package problem

import (
	"errors"
)

// The domain side of the vocabulary. A service's domain package returns plain Go errors; the ones
// a client should see carry their kind, so the HTTP layer needs no mapping of its own: From (and
// so huma's hooks and ErrorHandler) turns them into problems, and anything else is an internal
// error, logged once by the chassis with the request id.
//
//   - a *FieldError is invalid input (422) naming where it is; errors.Join of several lists each;
//   - an error wrapping ErrNotFound is a 404 whose detail is the error's text ("program 7: not found");
//   - an error with a ProblemKind method (Kinded) is a problem of that kind whose detail is its text.

// ErrNotFound is the one not-found of every service: wrap it with what was looked for, e.g.
// fmt.Errorf("program %d: %w", id, problem.ErrNotFound).
var ErrNotFound = errors.New("not found")

// FieldError is one invalid input: the one field-error type of every service's domain.
type FieldError struct {
	Location string // where the input is: body.files[3].path, query.limit, path.id
	Message  string // what is wrong with it
	Value    any    // the offending value, when it helps (sent as an Excerpt)
}

// Field returns the FieldError for the input at location.
func Field(location, message string, value any) *FieldError {
	return &FieldError{Location: location, Message: message, Value: value}
}

// Error names the input, then what is wrong with it.
func (e *FieldError) Error() string {
	if e.Location == "" {
		return e.Message
	}
	return e.Location + ": " + e.Message
}

// Kinded is a domain error that knows its problem kind (a conflict, a forbidden action…); its
// Error text is the problem's detail, so it must be written for the client.
type Kinded interface {
	error
	ProblemKind() Kind
}

// fromDomain returns the problem for a domain error (see above), or nil when err is none of them.
func fromDomain(err error) *Problem {
	var fields []Detail
	collectFields(err, &fields)
	if len(fields) > 0 {
		omitted := max(0, len(fields)-MaxErrors)
		fields = fields[:len(fields)-omitted]
		p := Invalid.New(validationDetail("validation failed", fields, omitted), fields...)
		p.ErrorsOmitted = omitted
		return p.bounded()
	}
	var k Kinded
	if errors.As(err, &k) {
		return k.ProblemKind().New(k.Error())
	}
	if errors.Is(err, ErrNotFound) {
		return NotFound.New(err.Error())
	}
	return nil
}

// collectFields gathers the FieldErrors of err, following errors.Join and wrapping.
func collectFields(err error, out *[]Detail) {
	switch x := err.(type) {
	case nil:
		return
	case *FieldError:
		*out = append(*out, Detail{Location: x.Location, Message: x.Message, Value: x.Value})
		return
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			collectFields(e, out)
		}
		return
	}
	collectFields(errors.Unwrap(err), out)
}
