package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/ingest"
)

// TestWorkerReleasesClaims: a committed file's path stays claimed for its grace (30 s after the
// eviction), then the running worker releases it on its own (its claims release loop, every
// buffer.ReleaseInterval) — nothing else does since evictions stopped releasing.
func TestWorkerReleasesClaims(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	rdb := e.s.Redis.Client()
	st := e.start(t, startBody(e.obsUnit))
	a := e.created(t, "/raw_data_files/", fileBody(st.ID, "claims/released.fits"))
	e.waitCommitted(t, a.TransactionID)
	key := ingest.FileClaims(ingest.File{ID: a.ID, InstrumentModuleID: 11, Path: "claims/released.fits"})[0].Key
	require.Equal(t, a.ID, rdb.HGet(ctx, "ingest:claims", key).Val(), "claimed for its grace after the commit")
	due, err := rdb.ZRange(ctx, "ingest:claims:release", 0, -1).Result()
	require.NoError(t, err)
	require.NotEmpty(t, due)
	time.Sleep(2 * time.Second) // a few ticks of the loop: nothing is due yet
	require.True(t, rdb.HExists(ctx, "ingest:claims", key).Val(), "not released before its grace")
	for _, m := range due { // the grace has passed
		rdb.ZAdd(ctx, "ingest:claims:release", redis.Z{Score: 0, Member: m})
	}
	require.Eventually(t, func() bool {
		return !rdb.HExists(ctx, "ingest:claims", key).Val() && rdb.ZCard(ctx, "ingest:claims:release").Val() == 0
	}, 5*time.Second, 50*time.Millisecond, "the worker releases what is due within a few ReleaseIntervals")
}
