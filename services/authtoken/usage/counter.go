// Package usage counts API token verifications in Redis and applies them to PostgreSQL in
// batches, exactly once, whatever crashes in between.
//
// The verification path does one Redis MULTI per use: HINCRBY of the token's pending count and
// HSET of its last use (time and client address), in two hashes shared by all tokens. A
// Flusher then, every interval:
//
//  1. claims everything pending with a Lua script that atomically RENAMEs both hashes to keys
//     of a new flush id, records that id (with the claim time) in a sorted set, and bumps a
//     generation number;
//  2. applies the flush in ONE PostgreSQL transaction that both records the flush id
//     (primary key) and adds every count in one batched UPDATE (authtoken.UsageSink);
//  3. deletes the flush's keys and its id in one MULTI.
//
// A crash after 1 leaves the flush in the sorted set, and the next Flush (on any replica, also
// at start) applies it; a crash after 2 makes that replay find the id already recorded and
// change nothing. So counts are never lost nor counted twice; Redis itself keeps them as
// durably as its AOF (appendfsync always) allows.
//
// Every key carries the hash tag {tokenusage}, so they share a slot in Redis Cluster.
package usage

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/authtoken"
)

// Redis keys.
const (
	keyPrefix     = "ops:{tokenusage}:"
	pendingCounts = contract.TokenUsageCountKey // hash token id -> uses not yet claimed
	pendingLast   = contract.TokenUsageLastKey  // hash token id -> "unix-micros ip" of the latest use
	flushSet      = keyPrefix + "flushes"       // sorted set of claimed, unfinished flush ids, by claim time (ms)
	generationKey = keyPrefix + "generation"    // incremented by every claim
	flushPrefix   = keyPrefix + "flush:"        // flushPrefix + id + ":count" / ":last": a claimed flush
)

func flushCounts(id string) string { return flushPrefix + id + ":count" }
func flushLast(id string) string   { return flushPrefix + id + ":last" }

// claimScript moves every pending use into a new flush. KEYS: pending counts, pending last,
// flush set, generation, the flush's counts and last keys. ARGV: flush id, claim time in ms.
// Returns 1 when something was claimed, 0 when nothing was pending.
const claimScript = `
local counts = redis.call('EXISTS', KEYS[1]) == 1
local last = redis.call('EXISTS', KEYS[2]) == 1
if not counts and not last then return 0 end
redis.call('INCR', KEYS[4])
if counts then redis.call('RENAME', KEYS[1], KEYS[5]) end
if last then redis.call('RENAME', KEYS[2], KEYS[6]) end
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1`

// pendingScript reads everything held for one token atomically. KEYS: pending counts, pending
// last, flush set, generation. ARGV: token id, flush key prefix. Returns generation, count,
// last, then flush id, count, last for every claimed flush (an empty string where there is nothing).
const pendingScript = `
local out = {redis.call('GET', KEYS[4]) or '0', redis.call('HGET', KEYS[1], ARGV[1]) or '', redis.call('HGET', KEYS[2], ARGV[1]) or ''}
for _, f in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
	table.insert(out, f)
	table.insert(out, redis.call('HGET', ARGV[2] .. f .. ':count', ARGV[1]) or '')
	table.insert(out, redis.call('HGET', ARGV[2] .. f .. ':last', ARGV[1]) or '')
end
return out`

// Counter is the Redis side: it records uses and hands them out in flushes. It implements
// authtoken.UsageCounter.
type Counter struct {
	rdb     redis.UniversalClient
	claim   *redis.Script
	pending *redis.Script
}

// NewCounter returns a Counter on rdb.
func NewCounter(rdb redis.UniversalClient) *Counter {
	return &Counter{rdb: rdb, claim: redis.NewScript(claimScript), pending: redis.NewScript(pendingScript)}
}

// Record counts one use of a token at a time from a client address, in one atomic round trip:
// authn.RecordTokenUse, which the other services' token caches call for the uses they verify.
func (c *Counter) Record(ctx context.Context, tokenID int64, at time.Time, ip string) error {
	return authn.RecordTokenUse(ctx, c.rdb, tokenID, at, ip)
}

// Generation is incremented by every claim; see authtoken.PendingUsage.
func (c *Counter) Generation(ctx context.Context) (int64, error) {
	n, err := c.rdb.Get(ctx, generationKey).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

// Pending returns everything held for a token, unclaimed and in unfinished flushes, atomically.
func (c *Counter) Pending(ctx context.Context, tokenID int64) (authtoken.PendingUsage, error) {
	res, err := c.pending.Run(ctx, c.rdb, []string{pendingCounts, pendingLast, flushSet, generationKey},
		tokenID, flushPrefix).StringSlice()
	if err != nil {
		return authtoken.PendingUsage{}, err
	}
	if len(res) < 3 || (len(res)-3)%3 != 0 {
		return authtoken.PendingUsage{}, fmt.Errorf("usage: unexpected reply of %d items", len(res))
	}
	p := authtoken.PendingUsage{InFlight: map[string]authtoken.UsageDelta{}}
	if p.Generation, err = strconv.ParseInt(res[0], 10, 64); err != nil {
		return p, fmt.Errorf("usage: generation %q: %w", res[0], err)
	}
	if p.Unclaimed, err = decodeDelta(tokenID, res[1], res[2]); err != nil {
		return p, err
	}
	for i := 3; i < len(res); i += 3 {
		d, err := decodeDelta(tokenID, res[i+1], res[i+2])
		if err != nil {
			return p, err
		}
		if d.Count > 0 {
			p.InFlight[res[i]] = d
		}
	}
	return p, nil
}

// claimFlush moves every pending use into a new flush and returns its id ("" when nothing was
// pending).
func (c *Counter) claimFlush(ctx context.Context, now time.Time) (string, error) {
	id := uuid.NewString()
	n, err := c.claim.Run(ctx, c.rdb,
		[]string{pendingCounts, pendingLast, flushSet, generationKey, flushCounts(id), flushLast(id)},
		id, now.UnixMilli()).Int()
	if err != nil || n == 0 {
		return "", err
	}
	return id, nil
}

// unfinishedFlushes lists the flushes claimed and not yet finished, oldest first.
func (c *Counter) unfinishedFlushes(ctx context.Context) ([]string, error) {
	return c.rdb.ZRange(ctx, flushSet, 0, -1).Result()
}

// readFlush returns the uses of a claimed flush, one delta per token.
func (c *Counter) readFlush(ctx context.Context, id string) ([]authtoken.UsageDelta, error) {
	pipe := c.rdb.Pipeline()
	countsCmd := pipe.HGetAll(ctx, flushCounts(id))
	lastCmd := pipe.HGetAll(ctx, flushLast(id))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	counts, last := countsCmd.Val(), lastCmd.Val()
	deltas := make([]authtoken.UsageDelta, 0, len(counts))
	for field, n := range counts {
		tokenID, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("usage: flush %s: token id %q: %w", id, field, err)
		}
		d, err := decodeDelta(tokenID, n, last[field])
		if err != nil {
			return nil, fmt.Errorf("usage: flush %s: %w", id, err)
		}
		if d.Count > 0 {
			deltas = append(deltas, d)
		}
	}
	return deltas, nil
}

// finishFlush forgets an applied flush.
func (c *Counter) finishFlush(ctx context.Context, id string) error {
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, flushCounts(id), flushLast(id))
		p.ZRem(ctx, flushSet, id)
		return nil
	})
	return err
}

// decodeDelta builds a token's delta from a stored count and last use (empty when absent).
func decodeDelta(tokenID int64, count, last string) (authtoken.UsageDelta, error) {
	d := authtoken.UsageDelta{TokenID: tokenID}
	if count == "" {
		return d, nil
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 0 {
		return d, fmt.Errorf("usage: token %d: count %q", tokenID, count)
	}
	d.Count = n
	if last == "" {
		return d, fmt.Errorf("usage: token %d: count without last use", tokenID)
	}
	micros, ip, _ := strings.Cut(last, " ")
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return d, fmt.Errorf("usage: token %d: last use %q", tokenID, last)
	}
	d.LastUsedAt, d.LastUsedIP = time.UnixMicro(us).UTC(), ip
	return d, nil
}
