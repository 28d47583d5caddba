package authtoken

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/pkg/authn"
)

// UsageDelta is the usage of one token not yet in its row: how many successful verifications,
// and the time and client address of the latest.
type UsageDelta struct {
	TokenID    int64
	Count      int64
	LastUsedAt time.Time
	LastUsedIP string
}

// PendingUsage is everything a UsageCounter holds for one token, read atomically: uses not yet
// claimed by a flush, and uses claimed by flushes that may or may not be applied yet.
type PendingUsage struct {
	Generation int64                 // changes whenever a flush claims pending uses
	Unclaimed  UsageDelta            // Count 0 when none
	InFlight   map[string]UsageDelta // by flush id
}

// UsageCounter counts verifications off the database path (Redis; see package usage).
type UsageCounter interface {
	Record(ctx context.Context, tokenID int64, at time.Time, ip string) error
	Pending(ctx context.Context, tokenID int64) (PendingUsage, error)
	// Generation is PendingUsage.Generation now.
	Generation(ctx context.Context) (int64, error)
}

// UsageSink applies counted usage to PostgreSQL exactly once per flush.
type UsageSink interface {
	// ApplyUsage adds deltas to their tokens and records flushID in one transaction; applied is
	// false (and nothing changes) when flushID was applied before.
	ApplyUsage(ctx context.Context, flushID string, deltas []UsageDelta) (applied bool, err error)
	// PruneUsageFlushes forgets applied flush ids older than before, except keep.
	PruneUsageFlushes(ctx context.Context, before time.Time, keep []string) (int64, error)
}

// TokenCache keeps verification records in Redis, off the PostgreSQL path (package
// tokencache). Records live at most TTL; invalidation also leaves a tombstone that keeps a
// verifier which read the row before the change from caching it after.
type TokenCache interface {
	// Get returns the record cached for hash; found is false when there is none.
	Get(ctx context.Context, hash string) (tok VerifiedToken, found bool, err error)
	// Fill caches tok, read from PostgreSQL at readAt, unless the token or its user was
	// invalidated since.
	Fill(ctx context.Context, hash string, tok VerifiedToken, readAt time.Time) error
	// InvalidateTokens drops the records of tokens just changed and blocks stale fills.
	InvalidateTokens(ctx context.Context, ids []int64) error
	// InvalidateUser does the same for every token of a user just changed.
	InvalidateUser(ctx context.Context, userID int64) error
	// TTL is how long a record lives: the most a change lags when its invalidation failed.
	TTL() time.Duration
}

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

// VerifyToken verifies an API token (SPEC §5.2) and records its use. It implements
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
	case errors.Is(err, ErrNotFound), err == nil && tok.ExpiresAt != nil && !time.Now().Before(*tok.ExpiresAt):
		s.Metrics.verified("invalid")
		return nil, authn.ErrInvalidCredential
	case err != nil:
		s.Metrics.verified("error")
		return nil, err
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
		Method: authn.MethodAPIToken, TokenID: tok.TokenID, Scopes: tok.Scopes,
	}, nil
}

// lookup finds the record of the token with hash: in the cache, or else in PostgreSQL, then
// caching it. Unknown hashes are not cached, so a token is never shadowed by an earlier miss.
// Without a usable cache (none, or Redis failed a moment ago) it is PostgreSQL alone.
func (s *TokenService) lookup(ctx context.Context, hash string) (VerifiedToken, error) {
	cached := s.Cache != nil && !s.redisDown.active(time.Now())
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
	readAt := time.Now()
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

// forgetTokens invalidates the cached records of tokens a write just touched (err is its
// outcome: nothing changed on ErrNotFound or ErrTokenRevoked; any other error may have come
// after the commit). It runs after the commit and before the answer. The write stands even
// when Redis cannot be reached; that is logged as an error, since the records it could not
// drop keep verifying for up to the cache TTL.
func (s *TokenService) forgetTokens(ctx context.Context, err error, ids ...int64) {
	if s.Cache == nil || len(ids) == 0 || errors.Is(err, ErrNotFound) || errors.Is(err, ErrTokenRevoked) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), invalidateTimeout)
	defer cancel()
	if err := s.Cache.InvalidateTokens(ctx, ids); err != nil {
		s.invalidationFailed(err, "tokens", ids)
	}
}

// forgetUser invalidates the cached records of every token of a user whose roles just changed.
func (s *TokenService) forgetUser(ctx context.Context, userID int64) {
	if s.Cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), invalidateTimeout)
	defer cancel()
	if err := s.Cache.InvalidateUser(ctx, userID); err != nil {
		s.invalidationFailed(err, "user", userID)
	}
}

// invalidationFailed reports an invalidation that did not reach Redis, and has this replica
// skip the cache for a moment.
func (s *TokenService) invalidationFailed(err error, what string, which any) {
	s.redisDown.start(time.Now(), redisRetryAfter)
	s.Metrics.invalidationFailed()
	if s.Log != nil {
		s.Log.Error("token cache: INVALIDATION FAILED, Redis unavailable: the change is committed, but cached records may keep verifying until they expire",
			what, which, "max_staleness", s.Cache.TTL(), "error", err)
	}
}

// redisFailed has this replica leave Redis alone for redisRetryAfter, and warns (once per
// fallbackWarnEvery) with msg.
func (s *TokenService) redisFailed(msg string, err error) {
	now := time.Now()
	s.redisDown.start(now, redisRetryAfter)
	if !s.fallbackWarned.active(now) && s.Log != nil {
		s.fallbackWarned.start(now, fallbackWarnEvery)
		s.Log.Warn(msg, "error", err)
	}
}

// recordUse counts one successful verification: in Redis, or directly in the row when Redis
// fails (a Redis error after the command was applied would count that use twice; a refused
// or unreachable Redis, the usual failure, cannot).
func (s *TokenService) recordUse(ctx context.Context, tokenID int64, ip string) error {
	ctx = context.WithoutCancel(ctx)
	at := time.Now().UTC()
	if s.Counter != nil {
		if !s.redisDown.active(at) {
			rctx, cancel := context.WithTimeout(ctx, redisRecordTimeout)
			err := s.Counter.Record(rctx, tokenID, at, ip)
			cancel()
			if err == nil {
				return nil
			}
			s.redisFailed("token usage: Redis unavailable, counting uses in PostgreSQL directly", err)
		}
		s.Metrics.directUpdate()
	}
	rctx, cancel := context.WithTimeout(ctx, rowRecordTimeout)
	defer cancel()
	return s.Store.RecordUse(rctx, tokenID, at, ip)
}

// clientAddr normalises the client address a verification reports; anything that is not an
// IP address is not stored.
func clientAddr(s string) string {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	return addr.Unmap().String()
}

// Usage returns a token's usage statistics, exact in real time: the committed row plus the
// uses still in Redis. The Redis snapshot, the row and the applied-flush ids are read so that
// no use is counted twice or missed; a flush claimed in between makes it read again.
func (s *TokenService) Usage(ctx context.Context, caller Caller, id int64) (TokenUsage, error) {
	v := caller.visibility()
	if s.Counter == nil {
		tok, _, err := s.Store.UsageStats(ctx, id, v, nil)
		return usageOf(tok, nil, nil), err
	}
	for attempt := 1; ; attempt++ {
		pending, err := s.Counter.Pending(ctx, id)
		if err != nil {
			if s.Log != nil {
				s.Log.Warn("token usage: Redis unavailable, reporting committed usage only", "error", err)
			}
			tok, _, err := s.Store.UsageStats(ctx, id, v, nil)
			return usageOf(tok, nil, nil), err
		}
		flushIDs := make([]string, 0, len(pending.InFlight))
		for f := range pending.InFlight {
			flushIDs = append(flushIDs, f)
		}
		tok, applied, err := s.Store.UsageStats(ctx, id, v, flushIDs)
		if err != nil {
			return TokenUsage{}, err
		}
		gen, err := s.Counter.Generation(ctx)
		if err != nil || gen == pending.Generation || attempt == 3 {
			return usageOf(tok, &pending, applied), nil
		}
	}
}

// usageOf adds to a token's committed usage what is pending and not yet applied.
func usageOf(tok Token, pending *PendingUsage, applied []string) TokenUsage {
	u := TokenUsage{
		TokenID: tok.ID, UsageCount: tok.UsageCount, LastUsedAt: tok.LastUsedAt, LastUsedIP: tok.LastUsedIP,
		CreatedAt: tok.CreatedAt, ExpiresAt: tok.ExpiresAt, IsActive: tok.IsActive, IsExpired: tok.IsExpired,
	}
	if pending == nil {
		return u
	}
	add := func(d UsageDelta) {
		if d.Count == 0 {
			return
		}
		u.PendingUses += d.Count
		if u.LastUsedAt == nil || d.LastUsedAt.After(*u.LastUsedAt) {
			at := d.LastUsedAt
			u.LastUsedAt = &at
			if d.LastUsedIP != "" {
				ip := d.LastUsedIP
				u.LastUsedIP = &ip
			}
		}
	}
	add(pending.Unclaimed)
	for id, d := range pending.InFlight {
		if !slices.Contains(applied, id) {
			add(d)
		}
	}
	u.UsageCount += u.PendingUses
	return u
}

// TokenMetrics are the Prometheus metrics of token verification.
type TokenMetrics struct {
	verifications *prometheus.CounterVec
	direct        prometheus.Counter
	cache         *prometheus.CounterVec
	invalidations prometheus.Counter
}

// NewTokenMetrics registers the token verification metrics with reg.
func NewTokenMetrics(reg prometheus.Registerer) *TokenMetrics {
	m := &TokenMetrics{
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_token_verifications_total",
			Help: "API token verifications by result (ok, malformed, invalid, insufficient_scope, error).",
		}, []string{"result"}),
		direct: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_token_usage_direct_updates_total",
			Help: "Token uses written straight to PostgreSQL because Redis was unavailable.",
		}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_token_cache_lookups_total",
			Help: "Token record lookups in the Redis cache by result (hit, miss, error).",
		}, []string{"result"}),
		invalidations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_token_cache_invalidation_failures_total",
			Help: "Token changes whose cached records could not be invalidated (Redis unavailable); they lag by up to the cache TTL.",
		}),
	}
	reg.MustRegister(m.verifications, m.direct, m.cache, m.invalidations)
	return m
}

func (m *TokenMetrics) cacheLookup(result string) {
	if m != nil {
		m.cache.WithLabelValues(result).Inc()
	}
}

func (m *TokenMetrics) invalidationFailed() {
	if m != nil {
		m.invalidations.Inc()
	}
}

func (m *TokenMetrics) verified(result string) {
	if m != nil {
		m.verifications.WithLabelValues(result).Inc()
	}
}

func (m *TokenMetrics) directUpdate() {
	if m != nil {
		m.direct.Inc()
	}
}

// pause is a span of time during which something is not done (its zero value is not active).
type pause struct{ until atomic.Int64 } // unix nanoseconds

func (p *pause) start(now time.Time, d time.Duration) { p.until.Store(now.Add(d).UnixNano()) }
func (p *pause) active(now time.Time) bool            { return now.UnixNano() < p.until.Load() }
