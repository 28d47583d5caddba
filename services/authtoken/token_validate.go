package authtoken

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// validName checks a token name: 1–255 characters, valid UTF-8, no control characters (they
// would corrupt logs and CSV exports, and PostgreSQL refuses NUL).
func validName(field, name string) error {
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return problem.Field("body."+field, "must be valid UTF-8", nil)
	case n < 1 || n > MaxTokenNameLength:
		return problem.Field("body."+field, fmt.Sprintf("must be 1 to %d characters", MaxTokenNameLength), name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return problem.Field("body."+field, "must not contain control characters", name)
	}
	return nil
}

// validScopes checks every scope against the scopes (docs/api.md, "Scopes and roles") and drops repeats, keeping the order.
func validScopes(scopes []string) ([]string, error) {
	out := []string{}
	for i, s := range scopes {
		if !authn.ValidScope(s) {
			return nil, problem.Field(fmt.Sprintf("body.scopes[%d]", i), fmt.Sprintf("unknown scope %q (see GET /api/tokens/scopes)", s), s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}
