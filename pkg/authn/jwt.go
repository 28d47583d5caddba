package authn

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are the claims of an obsops session JWT (docs/api.md, "Credentials"): sub is the username, uid the user
// id, roles the roles held at issue time, site the site whose authtoken signed it (OPS_SITE_NAME; absent in
// JWTs issued before it existed). Which site's JWTs a service accepts is decided by the keys its JWKS holds: a
// secondary site signs with its own key, which the main site never publishes (docs/two-sites.md).
type Claims struct {
	jwt.RegisteredClaims
	UID   int64    `json:"uid"`
	Roles []string `json:"roles"`
	Site  string   `json:"site,omitempty"`
}

// JWK is a public Ed25519 key in JSON Web Key form (RFC 8037).
type JWK struct {
	Kty string `json:"kty"` // OKP
	Crv string `json:"crv"` // Ed25519
	X   string `json:"x"`   // base64url public key
	Kid string `json:"kid"`
	Use string `json:"use"` // sig
	Alg string `json:"alg"` // EdDSA
}

// JWKSet is the document served at /.well-known/jwks.json.
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK describes pub as a signing JWK whose kid is its RFC 7638 thumbprint.
func PublicJWK(pub ed25519.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub), Kid: KeyID(pub), Use: "sig", Alg: "EdDSA"}
}

// KeyID is the RFC 7638 JWK thumbprint of an Ed25519 public key: stable for a key, so every
// service agrees on it without coordination.
func KeyID(pub ed25519.PublicKey) string {
	canonical := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// KeySource finds the public key that verifies a JWT by its kid.
type KeySource interface {
	PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// ErrUnknownKey means no published key has the JWT's kid.
var ErrUnknownKey = errors.New("unknown signing key")

// StaticKeys is a KeySource over keys known in-process (the authtoken service's own keys).
type StaticKeys map[string]ed25519.PublicKey

// PublicKey returns the key with kid.
func (s StaticKeys) PublicKey(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := s[kid]; ok {
		return k, nil
	}
	return nil, ErrUnknownKey
}

// JWKSCache is a KeySource that fetches the authtoken service's JWKS and caches it. An unknown kid
// triggers a refetch (at most once per MinRefresh), so a newly added rotation key is picked up
// without a restart; the whole set is refreshed once it is MaxAge old so removed keys stop
// verifying (the refresh runs in the background: until it lands, the old set still answers).
//
// Fetching never blocks verifications by keys already held: at most one fetch is in flight, a
// due refresh of a known key runs in the background while the key keeps verifying, and only a
// caller whose kid is unknown (or a cache that holds no keys yet) waits for the fetch. A failed
// fetch counts as an attempt too: while authtoken is down or slow, the keys held keep verifying
// and the endpoint is asked again at most once per MinRefresh (a cache without keys asks on
// demand, one fetch at a time).
type JWKSCache struct {
	URL        string
	HTTP       *http.Client
	MinRefresh time.Duration
	MaxAge     time.Duration

	mu        sync.Mutex
	keys      map[string]ed25519.PublicKey
	fetchedAt time.Time  // last successful fetch
	triedAt   time.Time  // last fetch attempt, successful or not
	inflight  *jwksFetch // the fetch running now, if any
}

// jwksFetch is one fetch of the JWKS; done is closed when it has finished, err is then its outcome.
type jwksFetch struct {
	done chan struct{}
	err  error
}

// jwksFetchTimeout bounds a fetch whatever the HTTP client's timeout, so a refresh cannot stay
// in flight forever.
const jwksFetchTimeout = 30 * time.Second

// NewJWKSCache returns a cache of the JWKS at url.
func NewJWKSCache(url string) *JWKSCache {
	return &JWKSCache{URL: url, HTTP: &http.Client{Timeout: 5 * time.Second}, MinRefresh: 10 * time.Second, MaxAge: 10 * time.Minute}
}

// PublicKey returns the key with kid, fetching the JWKS when needed.
func (c *JWKSCache) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	c.mu.Lock()
	now := time.Now()
	k, known := c.keys[kid]
	if known && now.Sub(c.fetchedAt) < c.MaxAge {
		c.mu.Unlock()
		return k, nil
	}
	f := c.inflight
	if f == nil && (c.keys == nil || now.Sub(c.triedAt) >= c.MinRefresh) {
		f = c.startFetch(ctx, now)
	}
	c.mu.Unlock()
	if known { // due for a refresh: keep verifying with it meanwhile (also while authtoken is away)
		return k, nil
	}
	if f == nil { // unknown kid, and the endpoint was asked less than MinRefresh ago
		return nil, ErrUnknownKey
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	k, known = c.keys[kid]
	c.mu.Unlock()
	switch {
	case known:
		return k, nil
	case f.err != nil:
		return nil, f.err
	}
	return nil, ErrUnknownKey
}

// startFetch begins a fetch in the background and records the attempt; c.mu must be held. The
// fetch keeps ctx's values but not its cancellation: callers that stop waiting do not cut it
// short for the others.
func (c *JWKSCache) startFetch(ctx context.Context, now time.Time) *jwksFetch {
	f := &jwksFetch{done: make(chan struct{})}
	c.inflight, c.triedAt = f, now
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimeout)
		defer cancel()
		keys, err := c.fetch(ctx)
		c.mu.Lock()
		if err == nil {
			c.keys, c.fetchedAt = keys, time.Now()
		}
		c.inflight, f.err = nil, err
		c.mu.Unlock()
		close(f.done)
	}()
	return f
}

// fetch reads the JWKS and returns its Ed25519 keys by kid.
func (c *JWKSCache) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return nil, err
	}
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS: status %d", resp.StatusCode)
	}
	var set JWKSet
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("decode JWKS: %w", err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		keys[k.Kid] = ed25519.PublicKey(x)
	}
	return keys, nil
}

// JWTVerifier checks session JWTs with a pinned algorithm (EdDSA), issuer and audience, a
// required expiry and a small leeway for clock skew.
//
// The user is identified by uid, the immutable user id: ownership, audit and the user
// directory key on it. sub (the username, for people and logs) must name the same user, which
// the directory checks; a JWT whose uid and sub disagree is refused.
type JWTVerifier struct {
	Keys     KeySource
	Issuer   string
	Audience string
	Leeway   time.Duration
	// Users, when set, refuses JWTs of users that are unknown, disabled or whose sessions
	// were revoked after the JWT was issued, and drops roles taken away since (see Directory).
	Users *Directory
}

// Verify parses and validates raw and returns the caller it names.
func (v *JWTVerifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	var claims Claims
	_, err := jwt.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok { // RFC 7515 §4.1.11: no extension is understood here
			return nil, errors.New("crit header present")
		}
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("missing kid")
		}
		return v.Keys.PublicKey(ctx, kid)
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(v.Issuer),
		jwt.WithAudience(v.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.Leeway),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredential, err)
	}
	if claims.Subject == "" || claims.UID <= 0 || claims.IssuedAt == nil {
		return nil, fmt.Errorf("%w: missing sub, uid or iat", ErrInvalidCredential)
	}
	roles := claims.Roles
	if v.Users != nil {
		iat := claims.IssuedAt.Time
		if roles, err = v.Users.Check(ctx, claims.UID, claims.Subject, &iat, claims.Roles); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidCredential, err)
		}
	}
	exp := claims.ExpiresAt.UTC() // present: WithExpirationRequired
	return &Principal{UserID: claims.UID, Username: claims.Subject, Roles: roles, Method: MethodJWT, ExpiresAt: &exp}, nil
}
