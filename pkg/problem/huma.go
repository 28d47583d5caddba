package problem

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// InstallHuma makes huma speak this package's vocabulary: every error huma creates (validation
// 422s naming the field in errors[].location, 400 for unparsable bodies, 406, handler errors
// that are not problems) and every huma.ErrorNNN helper a handler calls returns a *Problem. A
// handler may return a domain error as it is (a FieldError, an ErrNotFound, a Kinded error:
// domain.go); any other error becomes the generic Internal problem with the error as its cause
// (logged once, with the request id, by Transformer). huma keeps these hooks in package
// variables, so this is process-wide; the chassis calls it when it builds a service.
func InstallHuma() {
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return fromHuma(status, msg, errs)
	}
	huma.NewErrorWithContext = func(_ huma.Context, status int, msg string, errs ...error) huma.StatusError {
		return fromHuma(status, msg, errs)
	}
}

// fromHuma builds the problem for one of huma's errors. For 4xx the details are the offending
// inputs (huma.ErrorDetail gives location and value), at most MaxErrors of them with the rest
// counted, and a validation problem's detail names them; for 5xx they are the cause, kept for
// the log only.
func fromHuma(status int, msg string, errs []error) *Problem {
	var kept []error
	for _, e := range errs {
		if e != nil {
			kept = append(kept, e)
		}
	}
	if status >= 500 {
		if len(kept) > 0 { // huma's "unexpected error occurred": a handler's plain error
			joined := errors.Join(kept...)
			if d := fromDomain(joined); d != nil { // a domain error the handler returned as it was
				return d
			}
			return Internal.New("").WithCause(joined)
		}
		p := New(status, msg)
		if p.Kind() == Internal {
			p.cause = errors.New(msg)
		}
		return p
	}
	if status == 0 { // huma's example error, for the OpenAPI schema
		return &Problem{}
	}
	var details []Detail
	omitted := 0
	for _, e := range kept {
		if len(details) == MaxErrors {
			omitted++
			continue
		}
		var d huma.ErrorDetailer
		if errors.As(e, &d) {
			hd := d.ErrorDetail()
			details = append(details, Detail{Message: hd.Message, Location: hd.Location, Value: hd.Value})
			continue
		}
		var p *Problem // a resolver may return a problem of its own
		if errors.As(e, &p) && len(kept) == 1 {
			return p
		}
		details = append(details, Detail{Message: e.Error()})
	}
	p := New(status, msg)
	if status == http.StatusUnprocessableEntity || status == http.StatusBadRequest && len(details) > 0 {
		if status == http.StatusUnprocessableEntity {
			p = Invalid.New(msg)
		}
		if len(details) > 0 {
			p.Detail = validationDetail(msg, details, omitted)
		}
	}
	p.Errors = details
	p.ErrorsOmitted = omitted
	return p.bounded()
}

// Transformer completes every problem huma is about to send (for huma.Config.Transformers):
// the instance is the request's path, as for problems answered by Fiber, and the cause of an
// internal error is logged to log with the request id.
func Transformer(log *slog.Logger) huma.Transformer {
	return func(ctx huma.Context, _ string, v any) (any, error) {
		p, ok := v.(*Problem)
		if !ok {
			return v, nil
		}
		if p.cause != nil && p.Status >= 500 && log != nil {
			log.LogAttrs(context.Background(), slog.LevelError, "request failed",
				slog.String("request_id", ctx.Header("X-Request-Id")),
				slog.String("path", ctx.URL().Path), slog.String("error", p.cause.Error()))
		}
		return p.forRequest(ctx.URL().Path), nil
	}
}
