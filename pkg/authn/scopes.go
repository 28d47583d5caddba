package authn

import (
	"slices"
	"strings"
)

// Scope is a permission an API token can carry (docs/api.md, "Scopes and roles").
type Scope struct {
	Name        string `json:"name" example:"read:data"`
	Description string `json:"description" example:"Read data files"`
}

// Scopes lists every scope a token may be given, in SPEC order.
func Scopes() []Scope {
	return []Scope{
		{"read:observations", "Read observation data"},
		{"write:observations", "Create or update observations"},
		{"read:data", "Read data files"},
		{"write:data", "Create or update data files"},
		{"read:instruments", "Read instrument configurations"},
		{"read:sources", "Read the source catalog"},
		{"read:programs", "Read observing programs"},
		{"write:weather", "Store the site's weather readings (PWV)"},
	}
}

// ValidScope reports whether s is a listed scope or a wildcard over a listed action
// (`read:*`, `write:*`).
func ValidScope(s string) bool {
	for _, sc := range Scopes() {
		if sc.Name == s {
			return true
		}
	}
	action, rest, ok := strings.Cut(s, ":")
	if !ok || rest != "*" {
		return false
	}
	for _, sc := range Scopes() {
		if strings.HasPrefix(sc.Name, action+":") {
			return true
		}
	}
	return false
}

// ScopeGranted reports whether granted covers required: exactly, or by a wildcard such as
// `read:*` covering every `read:` scope.
func ScopeGranted(granted []string, required string) bool {
	if slices.Contains(granted, required) {
		return true
	}
	action, _, ok := strings.Cut(required, ":")
	return ok && slices.Contains(granted, action+":*")
}

// MissingScopes returns the required scopes that granted does not cover, in order.
func MissingScopes(granted, required []string) []string {
	var missing []string
	for _, r := range required {
		if !ScopeGranted(granted, r) {
			missing = append(missing, r)
		}
	}
	return missing
}
