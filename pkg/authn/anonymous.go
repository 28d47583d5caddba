package authn

import "strings"

// NeedsCredential reports whether a request for method and a concrete path (no query) reaches
// a route of the access table that needs a credential. Route paths match segment by segment, a
// {name} segment matching any one segment; a trailing slash is ignored. A path no route matches
// needs none (it gets a 404). The gateway asks it to answer an over-large body sent without a
// credential with 401 rather than 413, before reading that body.
func NeedsCredential(method, path string) bool {
	want := strings.Split(strings.Trim(path, "/"), "/")
	for key, rule := range Access() {
		m, p, ok := strings.Cut(key, " ")
		if !ok || m != method {
			continue
		}
		if routeMatches(strings.Split(strings.Trim(p, "/"), "/"), want) {
			return !rule.Anonymous
		}
	}
	return false
}

// routeMatches matches a route's path segments against a request's.
func routeMatches(route, path []string) bool {
	if len(route) != len(path) {
		return false
	}
	for i, seg := range route {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			if path[i] == "" {
				return false
			}
			continue
		}
		if seg != path[i] {
			return false
		}
	}
	return true
}
