package login

import (
	"strings"
	"testing"
)

func TestUsernameChoice(t *testing.T) {
	tests := []struct {
		name string
		c    profile
		want string
	}{
		{"preferred_username first", profile{PreferredUsername: "alice", Email: "a@example.org"}, "alice"},
		{"then the email, when the provider verified it", profile{Email: "a@example.org", EmailVerified: true}, "a@example.org"},
		{"never an unverified email", profile{Email: "a@example.org"}, "sub-1"},
		{"then the subject", profile{}, "sub-1"},
		{"an unusable preferred_username is skipped", profile{PreferredUsername: "Alice Liddell", Email: "a@example.org", EmailVerified: true}, "a@example.org"},
		{"an over-long one too", profile{PreferredUsername: strings.Repeat("x", 256)}, "sub-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.c.identity("https://idp.example", "sub-1")
			if id.Username != tt.want {
				t.Fatalf("username %q, want %q", id.Username, tt.want)
			}
			if id.Issuer != "https://idp.example" || id.Subject != "sub-1" {
				t.Fatalf("issuer/subject not kept: %+v", id)
			}
		})
	}
}

// TestUnverifiedEmailIsNotKept: an address the provider did not verify is not recorded.
func TestUnverifiedEmailIsNotKept(t *testing.T) {
	if id := (profile{PreferredUsername: "alice", Email: "root@example.org"}).identity("i", "s"); id.Email != "" {
		t.Fatalf("unverified email kept: %q", id.Email)
	}
	if id := (profile{PreferredUsername: "alice", Email: "a@example.org", EmailVerified: true}).identity("i", "s"); id.Email != "a@example.org" {
		t.Fatalf("verified email lost: %q", id.Email)
	}
}

func TestClipKeepsWholeCharacters(t *testing.T) {
	s := strings.Repeat("é", 300)
	got := clip(s)
	if !strings.HasSuffix(got, "…") || len([]rune(got)) != 201 || strings.ContainsRune(got, '\uFFFD') {
		t.Fatalf("clip gave %d runes: %q", len([]rune(got)), got)
	}
	if clip("short") != "short" {
		t.Fatal("short text must stay as it is")
	}
}
