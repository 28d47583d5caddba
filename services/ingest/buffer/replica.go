package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// Replica release at secondary sites (docs/architecture.md, two sites): a replayed transaction's
// records stay in the read cache after the commit in the main primary until this site's read
// replica has replayed the commit, so a client at the observatory reads its own writes at every
// moment.
const (
	replWaitKey   = "ingest:replwait"   // sorted set of committed transactions, score ≈ commit LSN
	replItemsPref = "ingest:replitems:" // + tx → JSON of the items to evict once replicated
)

// ParseLSN turns PostgreSQL's "X/Y" WAL position into a number (ok false for "" or garbage).
func ParseLSN(s string) (uint64, bool) {
	hi, lo, found := strings.Cut(s, "/")
	if !found {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return h<<32 | l, true
}

// MarkCommitted is Evict for a secondary site: each receipt records its commit (state
// committed) but the records stay cached; ReleaseReplicated evicts them once the replica has
// passed lsn. A commit whose LSN is unknown (the position query failed after the commit) is
// evicted at once, as at a main site (the worker avoids this: it retries the task to learn a
// position; see worker.errNoLSN).
func (b *Buffer) MarkCommitted(ctx context.Context, applied []Applied, lsn string, committedAt time.Time) error {
	n, ok := ParseLSN(lsn)
	if !ok {
		return b.Evict(ctx, applied, lsn, committedAt)
	}
	pipe := b.rdb.TxPipeline()
	for _, a := range applied {
		enc, err := json.Marshal(a.Items)
		if err != nil {
			return err
		}
		pipe.Set(ctx, replItemsPref+a.Tx, enc, replItemsTTL)
		pipe.ZAdd(ctx, replWaitKey, redis.Z{Score: float64(n), Member: a.Tx + "|" + lsn})
		queueCommit(ctx, pipe, a.Tx, lsn, committedAt)
	}
	queueLastApply(ctx, pipe, committedAt)
	_, err := pipe.Exec(ctx)
	return err
}

// ReleaseReplicated evicts the cached records of every committed transaction whose commit LSN the
// local replica has replayed (replay, from pg_last_wal_replay_lsn()) and marks their receipts
// replicated. It returns how many transactions it released.
func (b *Buffer) ReleaseReplicated(ctx context.Context, replay uint64) (int, error) {
	// Scores are float64 (exact up to 2^53 bytes of WAL); the exact comparison is done on the
	// LSN text kept in the member.
	cands, err := b.rdb.ZRangeByScore(ctx, replWaitKey, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatFloat(float64(replay)*(1+1e-15)+1, 'f', 0, 64), Count: 1000}).Result()
	if err != nil {
		return 0, err
	}
	released := 0
	for _, m := range cands {
		tx, lsn, _ := strings.Cut(m, "|")
		if n, ok := ParseLSN(lsn); !ok || n > replay {
			continue
		}
		enc, err := b.rdb.Get(ctx, replItemsPref+tx).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return released, err
		}
		var items []ingest.Item
		_ = json.Unmarshal(enc, &items)
		pipe := b.rdb.TxPipeline()
		queueRemoval(ctx, pipe, items)
		pipe.HSet(ctx, txStatePrefix+tx, "replicated_at", time.Now().UTC().Format(time.RFC3339Nano))
		pipe.Del(ctx, replItemsPref+tx)
		pipe.ZRem(ctx, replWaitKey, m)
		if _, err := pipe.Exec(ctx); err != nil {
			return released, err
		}
		released++
	}
	return released, nil
}
