package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// listedFiles is a CommittedSource of a fixed list of committed files and no replayed ones: the
// database's side (FileKeys, TakeReplayed on the real tables) is tested through the API in
// TestCommittedFilter; here only what the filter does with what it is given.
type listedFiles []ingest.FileKey

func (l listedFiles) FileKeys(_ context.Context, _ int, since time.Time, fn func([]ingest.FileKey) error) error {
	if !since.IsZero() {
		return nil
	}
	return fn(l)
}

func (listedFiles) TakeReplayed(context.Context, int, func([]ingest.FileKey) error) (int, error) {
	return 0, nil
}

// TestCommittedFilterCopy: the committed filter as Hold asks it. Without a copy kept in this
// process every unchecked write is ErrUnchecked (the database decides); built from the committed
// files, a committed path or client id is ErrUnchecked and a new one is held; a key appended to
// the stream (a direct write's LearnCommitted, a worker's Evict) is learnt by the copy that
// follows it; a checked write is held whatever its keys; a bulk of 5,000 new keys passes and one
// committed key among 1,000 new ones is enough.
func TestCommittedFilterCopy(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	write := func(checked bool, keys ...string) ingest.Write {
		id := ingest.NewID()
		it := ingest.Item{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef", Record: map[string]string{"id": id}, Unique: keys}
		return ingest.Write{Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "files:" + id, Items: []ingest.Item{it}, Checked: checked,
			Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx, "id": id}) }}
	}
	hold := func(w ingest.Write) error {
		_, err := b.Hold(ctx, w)
		return err
	}
	require.ErrorIs(t, hold(write(false, "p:1:new")), ingest.ErrUnchecked, "no copy here: the database decides")
	require.NoError(t, hold(write(true, "p:1:checked")), "a checked write is held")

	// A key appended before the copy is built is in the database (the worker appends after
	// the commit): the build's scan finds it, the stream is followed from after it.
	require.NoError(t, b.LearnCommitted(ctx, []ingest.Item{{Unique: []string{"p:1:appended-before"}}}))
	src := listedFiles{{ID: ingest.NewID(), InstrumentModuleID: 1, Path: "/committed.fits"}, {ID: "0d7a1a0e-6b37-4a61-9c69-0e6b7a3f4c21", InstrumentModuleID: 1, Path: "/own-id.fits"}}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		b.KeepCommitted(kctx, src, 50*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
		close(done)
	}()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, b.CommittedReady, 5*time.Second, 5*time.Millisecond)

	require.ErrorIs(t, hold(write(false, ingest.UniquePath(1, "/committed.fits"))), ingest.ErrUnchecked, "a committed path")
	require.ErrorIs(t, hold(write(false, ingest.UniqueFileID("0d7a1a0e-6b37-4a61-9c69-0e6b7a3f4c21"))), ingest.ErrUnchecked, "a client's committed id")
	require.NoError(t, hold(write(false, ingest.UniquePath(1, "/new.fits"))), "a new path is held without a query")
	require.ErrorIs(t, hold(write(false, ingest.UniquePath(2, "/new.fits"), ingest.UniquePath(1, "/committed.fits"))), ingest.ErrUnchecked, "one key is enough")

	// Learnt from the stream: a direct write's keys, and what a worker's Evict commits.
	require.NoError(t, b.LearnCommitted(ctx, []ingest.Item{{Unique: []string{"p:2:direct"}}}))
	require.Eventually(t, func() bool { return hold(write(false, "p:2:direct")) == ingest.ErrUnchecked }, 5*time.Second, 5*time.Millisecond)
	evicted := write(false, "p:3:evicted")
	require.NoError(t, hold(evicted))
	require.NoError(t, b.Evict(ctx, []Applied{{Tx: evicted.Tx, Items: evicted.Items}}, "", time.Now()))
	require.Eventually(t, func() bool { return hold(write(false, "p:3:evicted")) == ingest.ErrUnchecked }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, hold(write(true, "p:3:evicted")), "checked: held")

	// A bulk registration: 5,000 new paths pass; one committed path among 1,000 new ones does not.
	var keys []string
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("p:5:/data/2026-11-28/scan%04d/file%06d.fits", i/100, i))
	}
	bulk := write(false)
	for _, k := range keys {
		id := ingest.NewID()
		bulk.Items = append(bulk.Items, ingest.Item{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef", Record: map[string]string{"id": id}, Unique: []string{k}})
	}
	bulk.Items = bulk.Items[1:]
	require.NoError(t, hold(bulk))
	oneCommitted := ingest.Write{Items: append(slices.Clone(bulk.Items[:999]), ingest.Item{Unique: []string{"p:3:evicted"}})}
	require.ErrorIs(t, hold(oneCommitted), ingest.ErrUnchecked)

	// The stream is trimmed behind its followers.
	n, err := rdb.XLen(ctx, committedLog).Result()
	require.NoError(t, err)
	require.Positive(t, n)
}

// TestFilterTrust: a copy is trusted only once built and while it has read the stream within
// freshFor (committed.go: a path's claim outlives its commit's appending by claimGrace, so a
// trusted copy knows every path whose claim is gone).
func TestFilterTrust(t *testing.T) {
	require.Less(t, freshFor, claimGrace)
	require.Less(t, rebuildAfter, committedLogKeep)
	f := newFilter()
	f.built.Store(true)
	require.False(t, f.trusted(), "built but the stream not read since")
	f.built.Store(false)
	f.read(time.Now())
	require.False(t, f.trusted(), "not built")
	f.built.Store(true)
	require.True(t, f.trusted())
	f.read(time.Now().Add(-freshFor - time.Second))
	require.False(t, f.trusted(), "its last read is older than freshFor")
}

// TestFilterHash: filterHash is FNV-1a as hash/fnv computes it, mixed.
func TestFilterHash(t *testing.T) {
	for _, k := range []string{"", "p:11:/data/a.fits", "i:0d7a1a0e-6b37-4a61-9c69-0e6b7a3f4c21"} {
		h := fnv.New64a()
		h.Write([]byte(k))
		require.Equal(t, fmix64(h.Sum64()), filterHash(k), k)
	}
}

// TestFilterSize: the documented false-positive rate — under 1% at 16 million keys in 2^23
// words of five bits each.
func TestFilterSize(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the filter with 16 million keys")
	}
	f := newFilter()
	for i := range 16_000_000 {
		f.add(filterHash(fmt.Sprintf("p:11:/data/2026-11-28/scan%05d/chai_%07d.fits", i/1000, i)))
	}
	fp := 0
	const probes = 200_000
	for i := range probes {
		if f.has(fmt.Sprintf("p:12:/data/2026-11-29/scan%05d/chai_%07d.fits", i/1000, i)) {
			fp++
		}
	}
	rate := float64(fp) / probes
	t.Logf("false positives at 16 million keys: %.2f%%", 100*rate)
	require.Less(t, rate, 0.01)
}
