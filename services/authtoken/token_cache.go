package authtoken

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/obsops/obsops/pkg/problem"
)

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

// forgetTokens invalidates the cached records of tokens a write just touched (err is its
// outcome: nothing changed on problem.ErrNotFound or ErrTokenRevoked; any other error may have come
// after the commit). It runs after the commit and before the answer. The write stands even
// when Redis cannot be reached; that is logged as an error, since the records it could not
// drop keep verifying for up to the cache TTL.
func (s *TokenService) forgetTokens(ctx context.Context, err error, ids ...int64) {
	if s.Cache == nil || len(ids) == 0 || errors.Is(err, problem.ErrNotFound) || errors.Is(err, ErrTokenRevoked) {
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
	s.redisDown.start(s.now(), redisRetryAfter)
	s.Metrics.invalidationFailed()
	if s.Log != nil {
		s.Log.Error("token cache: INVALIDATION FAILED, Redis unavailable: the change is committed, but cached records may keep verifying until they expire",
			what, which, "max_staleness", s.Cache.TTL(), "error", err)
	}
}

// redisFailed has this replica leave Redis alone for redisRetryAfter, and warns (once per
// fallbackWarnEvery) with msg.
func (s *TokenService) redisFailed(msg string, err error) {
	now := s.now()
	s.redisDown.start(now, redisRetryAfter)
	if !s.fallbackWarned.active(now) && s.Log != nil {
		s.fallbackWarned.start(now, fallbackWarnEvery)
		s.Log.Warn(msg, "error", err)
	}
}

// pause is a span of time during which something is not done (its zero value is not active).
type pause struct{ until atomic.Int64 } // unix nanoseconds

func (p *pause) start(now time.Time, d time.Duration) { p.until.Store(now.Add(d).UnixNano()) }
func (p *pause) active(now time.Time) bool            { return now.UnixNano() < p.until.Load() }
