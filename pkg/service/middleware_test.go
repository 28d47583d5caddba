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

// TestAddressKey: budgets count an IPv4 address by itself and an IPv6 host by its /64.
func TestAddressKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":               "192.0.2.7",
		"2001:db8:1:2:3:4:5:6":    "2001:db8:1:2::/64",
		"2001:db8:1:2::ffff":      "2001:db8:1:2::/64",
		"::ffff:192.0.2.7":        "192.0.2.7",
		"not-an-address-at-all:x": "not-an-address-at-all:x",
	} {
		if got := AddressKey(in); got != want {
			t.Errorf("AddressKey(%q) = %q, want %q", in, got, want)
		}
	}
}
