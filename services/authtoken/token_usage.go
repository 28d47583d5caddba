package authtoken

import (
	"context"
	"net/netip"
	"slices"
	"time"
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

// recordUse counts one successful verification: in Redis, or directly in the row when Redis
// fails (a Redis error after the command was applied would count that use twice; a refused
// or unreachable Redis, the usual failure, cannot).
func (s *TokenService) recordUse(ctx context.Context, tokenID int64, ip string) error {
	ctx = context.WithoutCancel(ctx)
	at := s.now().UTC()
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
