package authtoken

import (
	"context"
	"errors"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// Bounds of the Redis calls of verification, and of recording one use once a verification has
// succeeded (the recording no longer depends on the client waiting for it). After a Redis
// failure, verification skips the cache and uses go straight to PostgreSQL for
// redisRetryAfter, so an outage does not cost every request the Redis timeout.
const (
	redisCacheTimeout  = 200 * time.Millisecond
	redisRecordTimeout = 500 * time.Millisecond
	redisRetryAfter    = time.Second
	rowRecordTimeout   = 3 * time.Second
	fallbackWarnEvery  = 10 * time.Second
	invalidateTimeout  = 2 * time.Second
)

// VerifyToken verifies an API token (docs/api.md, "API tokens") and records its use. It implements
// authn.TokenVerifier for this service's own middleware and POST /internal/tokens/verify.
//
//  1. A malformed string is refused before any database or Redis lookup.
//  2. The token's record (owner, roles, scopes, expiry) is read from the Redis cache, or on
//     a miss by one indexed query by hash for an active, unexpired token of an active user,
//     and then cached (see lookup). Every change to a token invalidates its record before it
//     is answered, so revocation takes effect at once on every replica.
//  3. The token must not have expired, and its scopes must cover req.Scopes (read:* covers
//     every read: scope).
//  4. The use is counted in Redis (one MULTI round trip) and committed to PostgreSQL by the
//     usage flusher within OPS_TOKEN_USAGE_FLUSH_INTERVAL (1 s by default): this is how SPEC
//     §5.2's "the change is committed" is met without a row update per request. If Redis is
//     unavailable the use is written to the row directly; if that fails too, verification
//     fails rather than lose the count.
func (s *TokenService) VerifyToken(ctx context.Context, req authn.VerifyRequest) (*authn.Principal, error) {
	if !authn.WellFormedAPIToken(req.Token) {
		s.Metrics.verified("malformed")
		return nil, authn.ErrInvalidCredential
	}
	tok, err := s.lookup(ctx, authn.HashAPIToken(req.Token))
	switch {
	case errors.Is(err, problem.ErrNotFound), err == nil && tok.ExpiresAt != nil && !s.now().Before(*tok.ExpiresAt):
		s.Metrics.verified("invalid")
		return nil, authn.ErrInvalidCredential
	case err != nil:
		s.Metrics.verified("error")
		return nil, err
	}
	if s.Directory != nil {
		if tok.Roles, err = s.Directory.Check(ctx, tok.UserID, tok.Username, nil, tok.Roles); err != nil {
			s.Metrics.verified("invalid")
			return nil, authn.ErrInvalidCredential
		}
	}
	if missing := authn.MissingScopes(tok.Scopes, req.Scopes); len(missing) > 0 {
		s.Metrics.verified("insufficient_scope")
		return nil, &authn.InsufficientScopeError{Missing: missing}
	}
	if err := s.recordUse(ctx, tok.TokenID, clientAddr(req.ClientIP)); err != nil {
		s.Metrics.verified("error")
		return nil, err
	}
	s.Metrics.verified("ok")
	return &authn.Principal{
		UserID: tok.UserID, Username: tok.Username, Roles: tok.Roles,
		Method: authn.MethodAPIToken, TokenID: tok.TokenID, Scopes: tok.Scopes, Service: tok.Service,
	}, nil
}

// lookup finds the record of the token with hash: in the cache, or else in PostgreSQL, then
// caching it. Unknown hashes are not cached, so a token is never shadowed by an earlier miss.
// Without a usable cache (none, or Redis failed a moment ago) it is PostgreSQL alone.
func (s *TokenService) lookup(ctx context.Context, hash string) (VerifiedToken, error) {
	cached := s.Cache != nil && !s.redisDown.active(s.now())
	if cached {
		rctx, cancel := context.WithTimeout(ctx, redisCacheTimeout)
		tok, found, err := s.Cache.Get(rctx, hash)
		cancel()
		switch {
		case err != nil:
			s.Metrics.cacheLookup("error")
			s.redisFailed("token cache: Redis unavailable, reading tokens from PostgreSQL", err)
			cached = false
		case found:
			s.Metrics.cacheLookup("hit")
			return tok, nil
		default:
			s.Metrics.cacheLookup("miss")
		}
	}
	readAt := s.now()
	tok, err := s.Store.Verify(ctx, hash)
	if err != nil || !cached {
		return tok, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCacheTimeout)
	defer cancel()
	if err := s.Cache.Fill(rctx, hash, tok, readAt); err != nil {
		s.redisFailed("token cache: Redis unavailable, reading tokens from PostgreSQL", err)
	}
	return tok, nil
}
