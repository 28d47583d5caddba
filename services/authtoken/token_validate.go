package authtoken

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/obsops/obsops/pkg/authn"
)

// validName checks a token name: 1–255 characters, valid UTF-8, no control characters (they
// would corrupt logs and CSV exports, and PostgreSQL refuses NUL).
func validName(field, name string) error {
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return &InputError{Field: field, Message: "must be valid UTF-8"}
	case n < 1 || n > MaxTokenNameLength:
		return &InputError{Field: field, Message: fmt.Sprintf("must be 1 to %d characters", MaxTokenNameLength), Value: name}
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return &InputError{Field: field, Message: "must not contain control characters", Value: name}
	}
	return nil
}

// validScopes checks every scope against the scopes (docs/api.md, "Scopes and roles") and drops repeats, keeping the order.
func validScopes(scopes []string) ([]string, error) {
	out := []string{}
	for i, s := range scopes {
		if !authn.ValidScope(s) {
			return nil, &InputError{Field: fmt.Sprintf("scopes[%d]", i), Message: "unknown scope " + fmt.Sprintf("%q", s) + " (see GET /api/tokens/scopes)", Value: s}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}
