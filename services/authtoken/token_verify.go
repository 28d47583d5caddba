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

// Bounds of recording one use once a verification has succeeded (the recording no longer
// depends on the client waiting for it). After a Redis failure, uses go straight to PostgreSQL
// for redisRetryAfter, so an outage does not cost every request the Redis timeout.
const (
	redisRecordTimeout = 500 * time.Millisecond
	redisRetryAfter    = time.Second
	rowRecordTimeout   = 3 * time.Second
	fallbackWarnEvery  = 10 * time.Second
)

// VerifyToken verifies an API token (SPEC §5.2) and records its use. It implements
// authn.TokenVerifier for this service's own middleware and POST /internal/tokens/verify.
//
//  1. A malformed string is refused before any database or Redis lookup.
//  2. One indexed query by hash finds an active, unexpired token of an active user, with the
//     user's roles. There is no cache, so revocation takes effect at once.
//  3. The token's scopes must cover req.Scopes (read:* covers every read: scope).
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
	tok, err := s.Store.Verify(ctx, authn.HashAPIToken(req.Token))
	switch {
	case errors.Is(err, ErrNotFound):
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
			s.redisDown.start(at, redisRetryAfter)
			if !s.fallbackWarned.active(at) && s.Log != nil {
				s.fallbackWarned.start(at, fallbackWarnEvery)
				s.Log.Warn("token usage: Redis unavailable, counting uses in PostgreSQL directly", "error", err)
			}
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
	}
	reg.MustRegister(m.verifications, m.direct)
	return m
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
