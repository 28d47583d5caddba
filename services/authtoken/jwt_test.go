package authtoken_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// signingKey reads an Ed25519 private key (PKCS#8 PEM) such as the suite's signing key.
func signingKey(t *testing.T, path string) ed25519.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	return k.(ed25519.PrivateKey)
}

// forge signs claims with method and key under header kid (empty: none).
func forge(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// TestJWTAttacks presents forged and broken session JWTs to the real authtoken, directly and
// through the gateway: every one is refused with 401 and a Bearer challenge.
func TestJWTAttacks(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_AUTH_FAILURE_LIMIT": "0"}})
	priv := signingKey(t, s.SigningKeyFile)
	pub := priv.Public().(ed25519.PublicKey)
	kid := authn.KeyID(pub)

	genuine := s.JWT(t, "mallory", "viewer")
	var real authn.Claims
	_, _, err := jwt.NewParser().ParseUnverified(genuine, &real)
	require.NoError(t, err)

	now := time.Now()
	claims := func(edit func(c *authn.Claims)) *authn.Claims {
		c := &authn.Claims{
			RegisteredClaims: jwt.RegisteredClaims{
				Issuer: "obsops", Subject: "mallory", Audience: jwt.ClaimStrings{"obsops"},
				IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
			},
			UID: real.UID, Roles: []string{"admin"},
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	_, otherKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	pubPEM, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)

	parts := strings.Split(genuine, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(payload, &m))
	m["roles"] = []string{"admin"}
	payload, err = json.Marshal(m)
	require.NoError(t, err)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]

	attacks := map[string]string{
		"alg none":                  forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid, claims(nil)),
		"HS256 with the public key": forge(t, jwt.SigningMethodHS256, []byte(pub), kid, claims(nil)),
		"HS256 with the public key PEM": forge(t, jwt.SigningMethodHS256,
			pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubPEM}), kid, claims(nil)),
		"HS256 with the JWK x": forge(t, jwt.SigningMethodHS256, []byte(authn.PublicJWK(pub).X), kid, claims(nil)),
		"expired": forge(t, jwt.SigningMethodEdDSA, priv, kid, claims(func(c *authn.Claims) {
			c.IssuedAt, c.ExpiresAt = jwt.NewNumericDate(now.Add(-2*time.Hour)), jwt.NewNumericDate(now.Add(-time.Hour))
		})),
		"wrong issuer": forge(t, jwt.SigningMethodEdDSA, priv, kid, claims(func(c *authn.Claims) { c.Issuer = "evil" })),
		"wrong audience": forge(t, jwt.SigningMethodEdDSA, priv, kid, claims(func(c *authn.Claims) {
			c.Audience = jwt.ClaimStrings{"another-service"}
		})),
		"missing exp":                          forge(t, jwt.SigningMethodEdDSA, priv, kid, claims(func(c *authn.Claims) { c.ExpiresAt = nil })),
		"unknown kid":                          forge(t, jwt.SigningMethodEdDSA, priv, "no-such-key", claims(nil)),
		"no kid":                               forge(t, jwt.SigningMethodEdDSA, priv, "", claims(nil)),
		"other Ed25519 key under the real kid": forge(t, jwt.SigningMethodEdDSA, otherKey, kid, claims(nil)),
		"tampered payload":                     tampered,
		"not a JWT":                            "eyJhbGciOiJFZERTQSJ9.garbage",
	}

	c := &http.Client{Timeout: 10 * time.Second}
	for _, base := range []string{s.URLs["authtoken"], s.GatewayURL} {
		// The control: a JWT forged with the real key and nothing wrong is accepted, so every
		// 401 below is the attack's doing.
		r := get(t, c, base+"/auth/me", forge(t, jwt.SigningMethodEdDSA, priv, kid, claims(nil)))
		require.Equal(t, http.StatusOK, r.Status, "control via %s: %s", base, r.Body)
		r = get(t, c, base+"/auth/me", genuine)
		require.Equal(t, http.StatusOK, r.Status, "genuine via %s: %s", base, r.Body)

		for name, tok := range attacks {
			r := get(t, c, base+"/auth/me", tok)
			require.Equal(t, http.StatusUnauthorized, r.Status, "%s via %s: %s", name, base, r.Body)
			require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer"), "%s via %s: WWW-Authenticate %q", name, base, r.Header.Get("WWW-Authenticate"))
		}
		r = get(t, c, base+"/auth/me", "")
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer"))
	}

	t.Run("login without an identity provider configured: 503", func(t *testing.T) {
		r := get(t, noRedirects(), s.GatewayURL+"/idp/login", "")
		require.Equal(t, http.StatusServiceUnavailable, r.Status)
		require.Equal(t, "login is not configured", problemDetail(t, r))
	})
}
