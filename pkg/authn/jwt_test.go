package authn_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
)

type signer struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newSigner(t *testing.T) signer {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return signer{pub, priv}
}

func (s signer) kid() string { return authn.KeyID(s.pub) }

func validClaims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": "obsops", "aud": "obsops", "sub": "alice", "uid": 7, "roles": []string{"admin"},
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

func (s signer) sign(t *testing.T, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = s.kid()
	str, err := tok.SignedString(s.priv)
	require.NoError(t, err)
	return str
}

func verifier(keys authn.KeySource) *authn.JWTVerifier {
	return &authn.JWTVerifier{Keys: keys, Issuer: "obsops", Audience: "obsops", Leeway: 5 * time.Second}
}

func TestJWTVerifierAcceptsAValidToken(t *testing.T) {
	s := newSigner(t)
	p, err := verifier(authn.StaticKeys{s.kid(): s.pub}).Verify(context.Background(), s.sign(t, validClaims()))
	require.NoError(t, err)
	require.Equal(t, &authn.Principal{UserID: 7, Username: "alice", Roles: []string{"admin"}, Method: authn.MethodJWT}, p)
}

func TestJWTVerifierRejectsAttacks(t *testing.T) {
	s := newSigner(t)
	other := newSigner(t)
	keys := authn.StaticKeys{s.kid(): s.pub}
	with := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := validClaims()
		mod(c)
		return c
	}
	hs256 := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, validClaims())
		tok.Header["kid"] = s.kid()
		str, err := tok.SignedString([]byte(s.pub)) // the classic key-confusion attack
		require.NoError(t, err)
		return str
	}
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, validClaims())
		tok.Header["kid"] = s.kid()
		str, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return str
	}
	forged := func() string { // right kid, wrong key
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, validClaims())
		tok.Header["kid"] = s.kid()
		str, err := tok.SignedString(other.priv)
		require.NoError(t, err)
		return str
	}
	tampered := func() string {
		good := s.sign(t, validClaims())
		evil := s.sign(t, with(func(c jwt.MapClaims) { c["roles"] = []string{"admin", "service"}; c["uid"] = 1 }))
		// header and signature of one token, payload of another
		return good[:indexDot(good)] + evil[indexDot(evil):lastDot(evil)] + good[lastDot(good):]
	}
	cases := map[string]string{
		"alg none":           none(),
		"HS256 with pub key": hs256(),
		"expired":            s.sign(t, with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })),
		"wrong issuer":       s.sign(t, with(func(c jwt.MapClaims) { c["iss"] = "evil" })),
		"wrong audience":     s.sign(t, with(func(c jwt.MapClaims) { c["aud"] = "other" })),
		"missing exp":        s.sign(t, with(func(c jwt.MapClaims) { delete(c, "exp") })),
		"missing uid":        s.sign(t, with(func(c jwt.MapClaims) { delete(c, "uid") })),
		"issued in future":   s.sign(t, with(func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() })),
		"unknown kid":        other.sign(t, validClaims()),
		"forged signature":   forged(),
		"tampered payload":   tampered(),
		"garbage":            "not.a.jwt",
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := verifier(keys).Verify(context.Background(), tok)
			require.ErrorIs(t, err, authn.ErrInvalidCredential)
		})
	}
}

func indexDot(s string) int {
	for i := range s {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

func lastDot(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

func TestJWKSCacheFetchesAndPicksUpNewKeys(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	var published atomic.Value
	published.Store(authn.JWKSet{Keys: []authn.JWK{authn.PublicJWK(a.pub)}})
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(published.Load())
	}))
	defer srv.Close()

	cache := authn.NewJWKSCache(srv.URL)
	cache.MinRefresh = 50 * time.Millisecond
	v := verifier(cache)
	ctx := context.Background()

	_, err := v.Verify(ctx, a.sign(t, validClaims()))
	require.NoError(t, err)
	_, err = v.Verify(ctx, a.sign(t, validClaims()))
	require.NoError(t, err)
	require.Equal(t, int32(1), fetches.Load(), "known keys are served from the cache")

	// A rotation key appears: an unknown kid refetches, but not more than once per MinRefresh.
	published.Store(authn.JWKSet{Keys: []authn.JWK{authn.PublicJWK(b.pub), authn.PublicJWK(a.pub)}})
	_, err = v.Verify(ctx, b.sign(t, validClaims()))
	require.ErrorIs(t, err, authn.ErrInvalidCredential, "refetch is rate-limited")
	time.Sleep(60 * time.Millisecond)
	_, err = v.Verify(ctx, b.sign(t, validClaims()))
	require.NoError(t, err)
	require.Equal(t, int32(2), fetches.Load())
}
