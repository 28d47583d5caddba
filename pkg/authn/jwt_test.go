package authn_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
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
	claims := validClaims()
	p, err := verifier(authn.StaticKeys{s.kid(): s.pub}).Verify(context.Background(), s.sign(t, claims))
	require.NoError(t, err)
	exp := time.Unix(claims["exp"].(int64), 0).UTC()
	require.Equal(t, &authn.Principal{UserID: 7, Username: "alice", Roles: []string{"admin"}, Method: authn.MethodJWT, ExpiresAt: &exp}, p)
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
	crit := func() string { // RFC 7515 §4.1.11: an extension this verifier does not understand
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, validClaims())
		tok.Header["kid"] = s.kid()
		tok.Header["crit"] = []string{"exp"}
		str, err := tok.SignedString(s.priv)
		require.NoError(t, err)
		return str
	}
	cases := map[string]string{
		"crit header":        crit(),
		"missing iat":        s.sign(t, with(func(c jwt.MapClaims) { delete(c, "iat") })),
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

// jwksEndpoint stands in for authtoken's JWKS endpoint: it publishes the keys of signers until
// told to fail (503) or to hang (until Release or the end of the test), and counts every fetch.
type jwksEndpoint struct {
	URL     string
	fetches atomic.Int32
	fail    atomic.Bool
	hang    atomic.Bool
	release func()
}

// Release ends every hanging fetch, present and future (they answer 503).
func (e *jwksEndpoint) Release() { e.release() }

func newJWKSEndpoint(t *testing.T, signers ...signer) *jwksEndpoint {
	e := &jwksEndpoint{}
	set := authn.JWKSet{}
	for _, s := range signers {
		set.Keys = append(set.Keys, authn.PublicJWK(s.pub))
	}
	release := make(chan struct{})
	var once sync.Once
	e.release = func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.fetches.Add(1)
		if e.hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		if e.fail.Load() || e.hang.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(e.Release) // runs first: hanging fetches end, so Close returns
	e.URL = srv.URL
	return e
}

// While the JWKS endpoint fails, JWTs signed by a key already held keep verifying, and the
// cache asks the endpoint again at most once per MinRefresh, not on every verification.
func TestJWKSCacheRefetchesAFailingEndpointAtMostOncePerMinRefresh(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	ep := newJWKSEndpoint(t, a)
	cache := authn.NewJWKSCache(ep.URL)
	cache.MinRefresh, cache.MaxAge = 100*time.Millisecond, 100*time.Millisecond
	v := verifier(cache)
	ctx := context.Background()
	tok := a.sign(t, validClaims())
	_, err := v.Verify(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, int32(1), ep.fetches.Load())

	ep.fail.Store(true)
	const period = 600 * time.Millisecond
	start := time.Now()
	verified := 0
	for time.Since(start) < period {
		_, err := v.Verify(ctx, tok)
		require.NoError(t, err, "the key already held keeps verifying while the endpoint fails")
		verified++
	}
	// One attempt per MinRefresh window at most (6 in the period), plus the first fetch and one
	// window of slack for timing.
	require.Greater(t, verified, 50)
	require.LessOrEqual(t, ep.fetches.Load(), int32(1+period/cache.MinRefresh+1),
		"fetch attempts for %d verifications", verified)

	// An unknown kid does not make a failed endpoint be asked again before MinRefresh either.
	before := ep.fetches.Load()
	for range 20 {
		_, err := v.Verify(ctx, b.sign(t, validClaims()))
		require.ErrorIs(t, err, authn.ErrInvalidCredential)
	}
	require.LessOrEqual(t, ep.fetches.Load(), before+1)
}

// A JWKS endpoint that hangs holds up no verification by a key already held: one refresh is in
// flight, the others verify with the keys at hand instead of queueing behind it.
func TestJWKSCacheVerifiesWhileARefreshHangs(t *testing.T) {
	a := newSigner(t)
	ep := newJWKSEndpoint(t, a)
	cache := authn.NewJWKSCache(ep.URL)
	cache.HTTP = &http.Client{Timeout: 3 * time.Second}
	cache.MinRefresh, cache.MaxAge = 50*time.Millisecond, 50*time.Millisecond
	v := verifier(cache)
	ctx := context.Background()
	tok := a.sign(t, validClaims())
	_, err := v.Verify(ctx, tok)
	require.NoError(t, err)

	ep.hang.Store(true)
	time.Sleep(60 * time.Millisecond) // the keys are due for a refresh now
	const n = 50
	errs := make(chan error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := v.Verify(ctx, tok)
			errs <- err
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Errorf("verifications still waiting for the hanging JWKS fetch after %s", time.Since(start))
		ep.Release() // let them finish, to count the fetches they made
		<-done
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, ep.fetches.Load(), int32(2), "one refresh in flight, not one per verification")
}

// A key the JWKS no longer publishes stops verifying once the cached set is MaxAge old.
func TestJWKSCacheDropsRemovedKeysAfterMaxAge(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	var published atomic.Value
	published.Store(authn.JWKSet{Keys: []authn.JWK{authn.PublicJWK(a.pub)}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(published.Load())
	}))
	defer srv.Close()
	cache := authn.NewJWKSCache(srv.URL)
	cache.MinRefresh, cache.MaxAge = 20*time.Millisecond, 50*time.Millisecond
	v := verifier(cache)
	ctx := context.Background()
	tok := a.sign(t, validClaims())
	_, err := v.Verify(ctx, tok)
	require.NoError(t, err)

	published.Store(authn.JWKSet{Keys: []authn.JWK{authn.PublicJWK(b.pub)}})
	require.Eventually(t, func() bool {
		_, err := v.Verify(ctx, tok)
		return err != nil
	}, 2*time.Second, 10*time.Millisecond, "the removed key still verifies")
	_, err = v.Verify(ctx, b.sign(t, validClaims()))
	require.NoError(t, err)
}
