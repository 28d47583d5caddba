package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// Idempotency-Key answers: the first request with a key claims it, its answer is kept for the
// others.

func idemKey(user int64, keyDigest string) string {
	return idemPrefix + strconv.FormatInt(user, 10) + ":" + keyDigest
}

// BeginIdempotent claims an Idempotency-Key for a request with fingerprint hash. It returns the
// stored entry when the key was used before (the caller replays or refuses), or nil when this
// request now owns the key and must call FinishIdempotent or AbortIdempotent.
func (b *Buffer) BeginIdempotent(ctx context.Context, user int64, keyDigest, hash string) (*ingest.IdemEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, _ := json.Marshal(ingest.IdemEntry{Hash: hash})
	k := idemKey(user, keyDigest)
	for range 3 {
		ok, err := b.rdb.SetNX(ctx, k, v, inProgressTTL).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		if ok {
			return nil, nil
		}
		s, err := b.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired in between
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		var e ingest.IdemEntry
		if json.Unmarshal([]byte(s), &e) != nil {
			return nil, fmt.Errorf("%w: unreadable idempotency entry", ingest.ErrBufferUnavailable)
		}
		return &e, nil
	}
	return nil, fmt.Errorf("%w: idempotency key contended", ingest.ErrBufferUnavailable)
}

// FinishIdempotent stores the answer of the request owning the key, for ttl.
func (b *Buffer) FinishIdempotent(ctx context.Context, user int64, keyDigest string, e ingest.IdemEntry, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	e.Done = true
	v, _ := json.Marshal(e)
	return b.rdb.Set(ctx, idemKey(user, keyDigest), v, ttl).Err()
}

// AbortIdempotent frees the key of a request that did not succeed, so a retry can run.
func (b *Buffer) AbortIdempotent(ctx context.Context, user int64, keyDigest string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	_ = b.rdb.Del(ctx, idemKey(user, keyDigest)).Err()
}
