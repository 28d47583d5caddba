package authn

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzWellFormedAPIToken checks the API token parser on arbitrary input: it never panics, it
// accepts exactly the canonical form (prefix + unpadded base64url of 32 bytes), and whatever it
// accepts can be hashed and displayed without leaking more than the display prefix.
func FuzzWellFormedAPIToken(f *testing.F) {
	tok, err := NewAPIToken()
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		tok.Raw,
		"",
		APITokenPrefix,
		APITokenPrefix + strings.Repeat("A", 43),
		APITokenPrefix + strings.Repeat("A", 42) + "B", // non-canonical last character
		APITokenPrefix + strings.Repeat("A", 44),
		APITokenPrefix + strings.Repeat("A", 42) + "=",
		APITokenPrefix + strings.Repeat("+", 43),
		"OPS_API_TOKEN_" + strings.Repeat("A", 43),
		"eyJhbGciOiJFZERTQSJ9.e30.sig",
		tok.Raw + "\n",
		" " + tok.Raw,
		APITokenPrefix + strings.Repeat("é", 21) + "A",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := WellFormedAPIToken(s)
		secret, hasPrefix := strings.CutPrefix(s, APITokenPrefix)
		decoded, decErr := base64.RawURLEncoding.Strict().DecodeString(secret)
		canonical := hasPrefix && decErr == nil && len(decoded) == 32 &&
			base64.RawURLEncoding.EncodeToString(decoded) == secret
		if ok != canonical {
			t.Fatalf("WellFormedAPIToken(%q) = %v, canonical form: %v", s, ok, canonical)
		}
		if ok && !LooksLikeAPIToken(s) {
			t.Fatalf("well-formed %q does not look like an API token", s)
		}
		if !ok {
			return
		}
		h := HashAPIToken(s)
		if len(h) != 64 || strings.ToLower(h) != h {
			t.Fatalf("hash %q is not 64 lowercase hex characters", h)
		}
		d := DisplayPrefix(s)
		if len(d) > 16 || !strings.HasPrefix(d, "ops_") || !strings.HasPrefix(secret, strings.TrimPrefix(d, "ops_")) {
			t.Fatalf("display prefix %q of %q", d, s)
		}
	})
}

// FuzzNewAPIToken checks that every generated token is well-formed, hashes to its Hash and
// displays as its Display (the fuzzer only drives the number of rounds).
func FuzzNewAPIToken(f *testing.F) {
	f.Add(uint8(1))
	f.Fuzz(func(t *testing.T, rounds uint8) {
		for range int(rounds%8) + 1 {
			tok, err := NewAPIToken()
			if err != nil {
				t.Fatal(err)
			}
			if !WellFormedAPIToken(tok.Raw) || HashAPIToken(tok.Raw) != tok.Hash || DisplayPrefix(tok.Raw) != tok.Display {
				t.Fatalf("generated token inconsistent: %+v", tok)
			}
		}
	})
}
