package service

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// guardParams returns a huma OnAddOperation hook that puts in front of each operation with query
// or path parameters a check PostgreSQL and the arithmetic would otherwise make for it, late and
// as a 500: a parameter value with a NUL character or invalid UTF-8 (PostgreSQL refuses both in
// text), and a number parameter that is NaN or infinite (huma parses "NaN" and "Inf" as floats;
// no coordinate, radius or range is either) get 422 naming the parameter (query.ra_deg). It runs
// after the operation's access check, so an unauthenticated caller still gets 401. (Path values
// reach handlers as sent, not unescaped, so only their raw bytes are checked.)
func guardParams(api huma.API) func(*huma.OpenAPI, *huma.Operation) {
	return func(_ *huma.OpenAPI, op *huma.Operation) {
		type param struct {
			in, name string
			number   bool
		}
		var params []param
		hasQuery := false
		for _, p := range op.Parameters {
			if p == nil || (p.In != "query" && p.In != "path") {
				continue
			}
			number := p.Schema != nil && p.Schema.Type == huma.TypeNumber
			params = append(params, param{p.In, p.Name, number})
			hasQuery = hasQuery || p.In == "query"
		}
		if len(params) == 0 {
			return
		}
		op.Middlewares = append(op.Middlewares, func(ctx huma.Context, next func(huma.Context)) {
			var errs []error
			var query url.Values
			if hasQuery {
				u := ctx.URL()
				query = u.Query()
			}
			for _, p := range params {
				var values []string
				if p.in == "path" {
					values = []string{ctx.Param(p.name)}
				} else {
					values = query[p.name]
				}
				for _, v := range values {
					if msg := badParam(v, p.number); msg != "" {
						errs = append(errs, &huma.ErrorDetail{Location: p.in + "." + p.name, Message: msg, Value: v})
						break
					}
				}
			}
			if len(errs) > 0 {
				_ = huma.WriteErr(api, ctx, http.StatusUnprocessableEntity, "validation failed", errs...)
				return
			}
			next(ctx)
		})
	}
}

// badParam says what is wrong with one parameter value ("" when nothing is).
func badParam(v string, number bool) string {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return "must not contain the NUL character"
	case !utf8.ValidString(v):
		return "must be valid UTF-8"
	case number:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return "must be a finite number"
		}
	}
	return ""
}
