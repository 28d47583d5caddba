package buffer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// TestHoldClaims: a write whose claim another owner holds is refused with that owner and nothing
// of it is held (no record, no task, none of its other claims); the same owner claiming again (a
// replay, or a second record of the same package) is fine; writes racing for one claim — many at
// once, so that rounds hold several of them in one script call — get exactly one winner; a
// claim is released claimGrace after its record left the cache (Forget, as Evict), by
// ReleaseClaims.
func TestHoldClaims(t *testing.T) {
	rdb, b, insp := newBuffer(t, time.Second)
	ctx := context.Background()
	const h = "0123456789abcdef0123456789abcdef"
	claimed := func(id string, claims ...ingest.Claim) ingest.Write {
		w := fileWrite(id, h)
		w.Items[0].Claims = claims
		return w
	}
	a, c := ingest.NewID(), ingest.NewID()
	wa := claimed(a, ingest.Claim{Key: "path:11:x.fits", Owner: a}, ingest.Claim{Key: "member:" + a, Owner: "pkg-1"})
	_, err := b.Hold(ctx, wa)
	require.NoError(t, err)

	wb := claimed(c, ingest.Claim{Key: "path:11:y.fits", Owner: c}, ingest.Claim{Key: "path:11:x.fits", Owner: c})
	_, err = b.Hold(ctx, wb)
	var ce *ingest.ClaimConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []ingest.ClaimConflict{{Item: 0, Claim: ingest.Claim{Key: "path:11:x.fits", Owner: c}, Owner: a}}, ce.Conflicts)
	require.False(t, rdb.HExists(ctx, "ingest:rec:file", c).Val(), "the refused write's record is not held")
	require.False(t, rdb.HExists(ctx, "ingest:claims", "path:11:y.fits").Val(), "nor its other claims")
	_, err = insp.GetTaskInfo(ingest.Queue, wb.TaskID)
	require.Error(t, err, "nor its task")

	// The same owner again: a replay is answered as one; another record of the same package.
	res, err := b.Hold(ctx, claimed(a, ingest.Claim{Key: "path:11:x.fits", Owner: a}, ingest.Claim{Key: "member:" + a, Owner: "pkg-1"}))
	require.NoError(t, err)
	require.True(t, res.Replayed)
	_, err = b.Hold(ctx, claimed(ingest.NewID(), ingest.Claim{Key: "member:" + a, Owner: "pkg-1"}))
	require.NoError(t, err)

	// Racing writes for one claim: exactly one is held.
	const racers = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ingest.NewID()
			_, err := b.Hold(ctx, claimed(id, ingest.Claim{Key: "name:e:raced", Owner: id}))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if isClaimConflict(err) {
				lost++
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, won)
	require.Equal(t, racers-1, lost)

	// Released claimGrace after its record left the cache (a request that read the database
	// before the commit still loses); then another owner may take it.
	require.NoError(t, b.Forget(ctx, wa.Items))
	require.True(t, rdb.HExists(ctx, "ingest:claims", "path:11:x.fits").Val(), "kept for its grace")
	_, err = b.Hold(ctx, claimed(ingest.NewID(), ingest.Claim{Key: "path:11:x.fits", Owner: "late"}))
	require.True(t, isClaimConflict(err), "%v", err)
	due, err := rdb.ZRange(ctx, "ingest:claims:release", 0, -1).Result()
	require.NoError(t, err)
	require.NotEmpty(t, due)
	for _, m := range due { // the grace has passed
		rdb.ZAdd(ctx, "ingest:claims:release", redis.Z{Score: 0, Member: m})
	}
	n, err := b.ReleaseClaims(ctx) // what the worker runs every buffer.ReleaseInterval
	require.NoError(t, err)
	require.Equal(t, len(due), n)
	require.False(t, rdb.HExists(ctx, "ingest:claims", "path:11:x.fits").Val())
	require.Zero(t, rdb.ZCard(ctx, "ingest:claims:release").Val())
	require.Empty(t, rdb.Keys(ctx, "ingest:claims:batch:*").Val(), "a released batch leaves nothing")
	// A member as earlier versions wrote it (one claim, "<key>\0<owner>") is released too, only
	// while its owner holds the claim.
	rdb.HSet(ctx, "ingest:claims", "path:11:old.fits", "o1", "path:11:retaken.fits", "new owner")
	rdb.ZAdd(ctx, "ingest:claims:release", redis.Z{Score: 0, Member: "path:11:old.fits\x00o1"}, redis.Z{Score: 0, Member: "path:11:retaken.fits\x00o1"})
	_, err = b.ReleaseClaims(ctx)
	require.NoError(t, err)
	require.False(t, rdb.HExists(ctx, "ingest:claims", "path:11:old.fits").Val())
	require.Equal(t, "new owner", rdb.HGet(ctx, "ingest:claims", "path:11:retaken.fits").Val())
	require.Zero(t, rdb.ZCard(ctx, "ingest:claims:release").Val())
	_, err = b.Hold(ctx, claimed(c, ingest.Claim{Key: "path:11:x.fits", Owner: c}))
	require.NoError(t, err)
	owners, err := b.ClaimOwners(ctx, "path:11:x.fits", "path:11:nobody")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"path:11:x.fits": c}, owners)

	// Evict removes a task's writes together: one release batch with every write's claims.
	e1, e2 := ingest.NewID(), ingest.NewID()
	w1 := claimed(e1, ingest.Claim{Key: "path:12:a.fits", Owner: e1})
	w2 := claimed(e2, ingest.Claim{Key: "path:12:b.fits", Owner: e2})
	for _, w := range []ingest.Write{w1, w2} {
		_, err := b.Hold(ctx, w)
		require.NoError(t, err)
	}
	require.NoError(t, b.Evict(ctx, []buffer.Applied{{Tx: w1.Tx, Items: w1.Items}, {Tx: w2.Tx, Items: w2.Items}}, "0/1", time.Now()))
	require.False(t, rdb.HExists(ctx, "ingest:rec:file", e1).Val())
	require.False(t, rdb.HExists(ctx, "ingest:rec:file", e2).Val())
	batches := rdb.Keys(ctx, "ingest:claims:batch:*").Val()
	require.Len(t, batches, 1, "one batch for the task")
	require.Equal(t, int64(1), rdb.ZCard(ctx, "ingest:claims:release").Val())
	require.JSONEq(t, `[["path:12:a.fits","`+e1+`"],["path:12:b.fits","`+e2+`"]]`, rdb.Get(ctx, batches[0]).Val())
}

// TestReleaseClaimsDrainsBacklog: the worker's periodic release (WatchClaims) releases every
// batch that is due, however many (a script call takes at most 100): a backlog, after a pause of
// the worker, does not wait one tick per hundred batches. A batch not yet due stays.
func TestReleaseClaimsDrainsBacklog(t *testing.T) {
	rdb, b, _ := newBuffer(t, time.Second)
	ctx := context.Background()
	const due = 250
	pipe := rdb.Pipeline()
	for i := range due + 1 {
		key, owner := fmt.Sprintf("path:11:%03d.fits", i), fmt.Sprintf("owner-%03d", i)
		pipe.HSet(ctx, "ingest:claims", key, owner)
		pipe.Set(ctx, fmt.Sprintf("ingest:claims:batch:b%03d", i), `[["`+key+`","`+owner+`"]]`, 0)
		at := float64(i) // long past
		if i == due {
			at = float64(time.Now().Add(time.Hour).UnixMilli())
		}
		pipe.ZAdd(ctx, "ingest:claims:release", redis.Z{Score: at, Member: fmt.Sprintf("b%03d", i)})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	n, err := b.ReleaseClaims(ctx)
	require.NoError(t, err)
	require.Equal(t, due, n)
	require.Equal(t, map[string]string{fmt.Sprintf("path:11:%03d.fits", due): fmt.Sprintf("owner-%03d", due)}, rdb.HGetAll(ctx, "ingest:claims").Val())
	require.Equal(t, int64(1), rdb.ZCard(ctx, "ingest:claims:release").Val())
	require.Len(t, rdb.Keys(ctx, "ingest:claims:batch:*").Val(), 1)
}

func isClaimConflict(err error) bool {
	var ce *ingest.ClaimConflictError
	return errors.As(err, &ce)
}
