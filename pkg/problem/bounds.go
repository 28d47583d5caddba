package problem

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The bounds of an error body. A request can hold any number of mistakes (a 530 KB JSON object
// with 60,000 unknown keys has 60,000), and huma attaches the whole decoded body to each
// "unexpected property" error: echoed as it was, that one request made a 31 GB answer and the
// service was killed for memory. So a problem lists at most MaxErrors inputs (ErrorsOmitted
// counts the rest), its detail is cut at MaxDetailBytes, and a value is echoed only as a short
// excerpt (Excerpt): an answer stays a few kilobytes whatever the request was.
const (
	// MaxErrors is how many offending inputs a problem lists; the first ones, in input order.
	MaxErrors = 20
	// MaxDetailBytes bounds the detail sentence (which names the listed inputs).
	MaxDetailBytes = 2048
	// MaxValueBytes bounds one echoed string value; longer ones end in "…".
	MaxValueBytes = 64
	// maxValueItems is the longest list of scalars echoed as a list; a longer list, or any
	// object, is described by its size instead.
	maxValueItems = 10
)

// bounded returns p with at most MaxErrors errors (the cut ones counted in ErrorsOmitted), a
// detail of at most MaxDetailBytes and every value an excerpt. It changes p in place (p is being
// built or is a copy being sent) and returns it; bounding twice changes nothing more.
func (p *Problem) bounded() *Problem {
	if n := len(p.Errors); n > MaxErrors {
		p.ErrorsOmitted += n - MaxErrors
		p.Errors = p.Errors[:MaxErrors:MaxErrors]
	}
	for i := range p.Errors {
		p.Errors[i].Value = Excerpt(p.Errors[i].Value)
		p.Errors[i].Message = cut(p.Errors[i].Message, MaxDetailBytes/4)
		p.Errors[i].Location = cut(p.Errors[i].Location, MaxDetailBytes/4)
	}
	p.Detail = cut(p.Detail, MaxDetailBytes)
	return p
}

// Excerpt is what a problem may echo of an offending value: numbers, booleans and nil as they
// are, a string cut to MaxValueBytes, a short list of such scalars as a list, and anything
// larger or structured as a description of its size ("object with 60000 properties"), never
// its content.
func Excerpt(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case fmt.Stringer: // a time, a UUID: its text, not its fields
		return cut(x.String(), MaxValueBytes)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
		return Excerpt(rv.Elem().Interface())
	case reflect.String:
		return cut(rv.String(), MaxValueBytes)
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return v
	case reflect.Map:
		return fmt.Sprintf("object with %d properties", rv.Len())
	case reflect.Slice, reflect.Array:
		n := rv.Len()
		if n > maxValueItems {
			return fmt.Sprintf("array of %d items", n)
		}
		out := make([]any, n)
		for i := range n {
			if isDescription(rv.Index(i)) { // a list of lists or objects: its size only
				return fmt.Sprintf("array of %d items", n)
			}
			out[i] = Excerpt(rv.Index(i).Interface())
		}
		return out
	}
	return "a value of type " + rv.Type().String()
}

// isDescription reports whether an element's excerpt would be a size description, i.e. the
// element is a container rather than a scalar.
func isDescription(v reflect.Value) bool {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		return true
	}
	return false
}

// validationDetail is the detail of a problem about invalid inputs: msg, then each listed input
// ("body.x: what is wrong"), then how many more there were (cut so that count always shows).
func validationDetail(msg string, details []Detail, omitted int) string {
	where := make([]string, len(details))
	for i, d := range details {
		where[i] = d.Message
		if d.Location != "" {
			where[i] = d.Location + ": " + d.Message
		}
	}
	s := strings.TrimSuffix(msg, ".") + ": " + strings.Join(where, "; ")
	if omitted > 0 {
		s = cut(s, MaxDetailBytes-64) + "; and " + strconv.Itoa(omitted) + " more not listed"
	}
	return s
}

// cut returns s shortened to at most max bytes at a rune boundary, ending in "…" when cut.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
