package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// Idempotency-Key answers: the first request with a key claims it, its answer is kept for the
// others.
//
// Each user's entries are counted in a sorted set (idemCountPrefix + user id: member the key
// digest, score when the entry expires, unix ms), written with the entry in the same round trip:
// a user holding MaxIdempotencyPerUser unexpired entries gets no new one
// (ingest.IdempotencyLimitError, 429) until its oldest expires, so one credential cannot fill
// Redis (noeviction) and leave the instruments' writes without room. Expired members are removed
// by the next claim of the same user; the set itself expires with its last entry.

func idemKey(user int64, keyDigest string) string {
	return idemPrefix + strconv.FormatInt(user, 10) + ":" + keyDigest
}

func idemCountKey(user int64) string { return idemCountPrefix + strconv.FormatInt(user, 10) }

// beginIdemScript claims an Idempotency-Key. KEYS: the entry, the user's count set. ARGV: the
// in-progress entry, its lifetime in ms, now (unix ms), the most entries per user (0: no limit),
// the key digest. Replies {1, stored entry} when the key is in use, {2, ms until the user's
// oldest entry expires} when the user holds the most entries, {0} when this request now owns it.
const beginIdemScript = `
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
local now, ttl, max = tonumber(ARGV[3]), tonumber(ARGV[2]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if max > 0 and redis.call('ZCARD', KEYS[2]) >= max then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {2, tostring(tonumber(first[2]) - now)}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return {0}`

// BeginIdempotent claims an Idempotency-Key for a request with fingerprint hash, in one round
// trip. It returns the stored entry when the key was used before (the caller replays or
// refuses), or nil when this request now owns the key and must call FinishIdempotent or
// AbortIdempotent; *ingest.IdempotencyLimitError when user holds MaxIdempotencyPerUser entries.
func (b *Buffer) BeginIdempotent(ctx context.Context, user int64, keyDigest, hash string) (*ingest.IdemEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, _ := json.Marshal(ingest.IdemEntry{Hash: hash})
	res, err := b.beginIdem.Run(ctx, b.rdb, []string{idemKey(user, keyDigest), idemCountKey(user)},
		v, inProgressTTL.Milliseconds(), time.Now().UnixMilli(), b.MaxIdempotencyPerUser, keyDigest).Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	code, _ := res[0].(int64)
	switch code {
	case 0:
		return nil, nil
	case 1:
		s, _ := res[1].(string)
		var e ingest.IdemEntry
		if json.Unmarshal([]byte(s), &e) != nil {
			return nil, fmt.Errorf("%w: unreadable idempotency entry", ingest.ErrBufferUnavailable)
		}
		return &e, nil
	case 2:
		s, _ := res[1].(string)
		ms, _ := strconv.ParseInt(s, 10, 64)
		return nil, &ingest.IdempotencyLimitError{Limit: b.MaxIdempotencyPerUser, RetryAfter: max(1, int((ms+999)/1000))}
	}
	return nil, fmt.Errorf("%w: unreadable idempotency answer %v", ingest.ErrBufferUnavailable, res)
}

// FinishIdempotent stores the answer of the request owning the key, for ttl, and counts the
// entry until then (one MULTI round trip).
func (b *Buffer) FinishIdempotent(ctx context.Context, user int64, keyDigest string, e ingest.IdemEntry, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	e.Done = true
	v, _ := json.Marshal(e)
	count := idemCountKey(user)
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, idemKey(user, keyDigest), v, ttl)
		p.ZAdd(ctx, count, redis.Z{Score: float64(time.Now().Add(ttl).UnixMilli()), Member: keyDigest})
		p.PExpire(ctx, count, ttl) // every entry lives ttl at most: the set outlives them all
		return nil
	})
	return err
}

// AbortIdempotent frees the key of a request that did not succeed, so a retry can run.
func (b *Buffer) AbortIdempotent(ctx context.Context, user int64, keyDigest string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	_, _ = b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, idemKey(user, keyDigest))
		p.ZRem(ctx, idemCountKey(user), keyDigest)
		return nil
	})
}
