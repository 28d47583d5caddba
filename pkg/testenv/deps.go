package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// RequireNoDeps fails the test when the Go package pkg (a path or pattern `go list` takes, e.g.
// "./httpapi") depends, directly or not, on any package whose import path starts with one of
// forbidden. It is how a service states its layering as a test: its HTTP layer links no storage
// package, its domain no adapter.
func RequireNoDeps(t testing.TB, pkg string, forbidden ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("%s depends on %s (layering: it must not reach %s)", pkg, d, f)
			}
		}
	}
}
