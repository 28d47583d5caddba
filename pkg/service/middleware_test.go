package service

import (
	"regexp"
	"testing"
)

// TestNewRequestID: request ids are well-formed version 4 UUIDs, accepted by validRequestID, and
// do not repeat.
func TestNewRequestID(t *testing.T) {
	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100000 {
		id := newRequestID()
		if !v4.MatchString(id) || !validRequestID(id) {
			t.Fatalf("malformed request id %q", id)
		}
		if seen[id] {
			t.Fatalf("request id %q repeated", id)
		}
		seen[id] = true
	}
}
