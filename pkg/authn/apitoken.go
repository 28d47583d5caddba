package authn

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// APITokenPrefix starts every API token string (docs/api.md, "API tokens").
const APITokenPrefix = "ops_api_token_"

// apiTokenSecretLen is the length of base64url (unpadded) of 32 random bytes.
const apiTokenSecretLen = 43

// APIToken is a newly generated token: Raw is shown to its owner once and never stored.
type APIToken struct {
	Raw     string // ops_api_token_ + base64url(32 random bytes)
	Hash    string // lowercase hex SHA-256 of Raw, the only form stored
	Display string // short, non-secret prefix for lists (at most 16 characters)
}

// NewAPIToken generates a token from 32 bytes of crypto/rand.
func NewAPIToken() (APIToken, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return APIToken{}, err
	}
	raw := APITokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return APIToken{Raw: raw, Hash: HashAPIToken(raw), Display: DisplayPrefix(raw)}, nil
}

// HashAPIToken is the lowercase hex SHA-256 of the full token string.
func HashAPIToken(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

// DisplayPrefix is "ops_" plus the first 8 characters of the secret part: enough to tell tokens
// apart in a list, far too little to guess the rest (48 of 256 bits).
func DisplayPrefix(raw string) string {
	return "ops_" + strings.TrimPrefix(raw, APITokenPrefix)[:8]
}

// LooksLikeAPIToken reports whether a bearer credential claims to be an API token (as opposed to
// a JWT); WellFormedAPIToken then says whether it can possibly be one.
func LooksLikeAPIToken(s string) bool { return strings.HasPrefix(s, APITokenPrefix) }

// WellFormedAPIToken reports whether s has the exact shape of an API token, so malformed strings
// are refused before any database or Redis lookup.
func WellFormedAPIToken(s string) bool {
	secret, ok := strings.CutPrefix(s, APITokenPrefix)
	if !ok || len(secret) != apiTokenSecretLen {
		return false
	}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// The last character of 43 base64url characters carries only 4 bits: reject non-canonical forms.
	_, err := base64.RawURLEncoding.Strict().DecodeString(secret)
	return err == nil
}
