package buffer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// TestProbeRound: the committed filter as a round asks it (one BITFIELD). Not built, every probe
// is unchecked; built, a new key passes and is set at once, so the same key again — in a later
// round or later in the same round — is unchecked; a checked write only sets its keys; learnt
// keys (LearnCommitted) are unchecked; keys without Probe are set, never judged.
func TestProbeRound(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	write := func(checked bool, keys ...string) *heldWrite {
		it := ingest.Item{Kind: ingest.KindFile, ID: ingest.NewID()}
		for _, k := range keys {
			it.Unique = append(it.Unique, ingest.Unique{Key: k, Probe: true})
		}
		return &heldWrite{w: ingest.Write{Items: []ingest.Item{it}, Checked: checked}}
	}
	probe := func(ws ...*heldWrite) []bool {
		t.Helper()
		got, err := b.probeRound(ctx, ws)
		require.NoError(t, err)
		return got
	}

	require.Equal(t, []bool{true}, probe(write(false, "path:1:a")), "not built: the database decides")
	require.NoError(t, b.learn(ctx, nil, true))
	built, err := b.CommittedBuilt(ctx)
	require.NoError(t, err)
	require.True(t, built)

	require.Equal(t, []bool{true}, probe(write(false, "path:1:a")), "set by the unbuilt round's probe")
	require.Equal(t, []bool{false, true, false}, probe(write(false, "path:1:b"), write(false, "path:1:b"), write(false, "path:1:c")),
		"the second write of a key in one round is unchecked")
	require.Equal(t, []bool{true}, probe(write(false, "path:1:c", "path:1:new")), "one key that may be taken is enough")
	require.Equal(t, []bool{false}, probe(write(true, "path:1:d")), "checked: only set")
	require.Equal(t, []bool{true}, probe(write(false, "path:1:d")))

	require.NoError(t, b.LearnCommitted(ctx, []ingest.Item{{Unique: []ingest.Unique{{Key: "path:2:x"}}}}))
	require.Equal(t, []bool{true}, probe(write(false, "path:2:x")))

	noProbe := write(false)
	noProbe.w.Items[0].Unique = []ingest.Unique{{Key: "path:3:y"}}
	require.Equal(t, []bool{false}, probe(noProbe), "learnt only")
	require.Equal(t, []bool{true}, probe(write(false, "path:3:y")))

	require.Nil(t, probe(&heldWrite{w: ingest.Write{Items: []ingest.Item{{ID: "x"}}}}), "no keys: no command")

	// Many keys in one round, as a bulk registration: none of 5,000 new paths is a false positive
	// here, and all are taken afterwards.
	many := write(false)
	var keys []string
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("path:4:/data/2026-11-28/scan%04d/file%06d.fits", i/100, i))
	}
	for _, k := range keys {
		many.w.Items[0].Unique = append(many.w.Items[0].Unique, ingest.Unique{Key: k, Probe: true})
	}
	require.Equal(t, []bool{false}, probe(many))
	for _, k := range keys[:50] {
		require.Equal(t, []bool{true}, probe(write(false, k)), k)
	}
}

// TestFilterLayoutOfFirstVersion: the filter's first version set a key's mask as the big-endian
// 32-bit integer at word "#w" (BITFIELD … i32 #w, from Lua); setOps sets and reads the same
// bits one by one, so a filter it built stays valid after an upgrade.
func TestFilterLayoutOfFirstVersion(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	require.NoError(t, b.learn(ctx, nil, true))
	const old, fresh = "path:7:/old/as/the/first/version/wrote/it.fits", "path:7:/new/through/setops.fits"
	word, mask := filterBits(old)
	require.NoError(t, rdb.Do(ctx, "BITFIELD", committedKey, "SET", "i32", fmt.Sprintf("#%d", word), int64(int32(mask))).Err())
	w := &heldWrite{w: ingest.Write{Items: []ingest.Item{{Unique: []ingest.Unique{{Key: old, Probe: true}}}}}}
	got, err := b.probeRound(ctx, []*heldWrite{w})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, got, "a key the first version set is taken")

	require.NoError(t, b.learn(ctx, []string{fresh}, false))
	word, mask = filterBits(fresh)
	v, err := rdb.Do(ctx, "BITFIELD", committedKey, "GET", "i32", fmt.Sprintf("#%d", word)).Int64Slice()
	require.NoError(t, err)
	require.Equal(t, int64(int32(mask)), v[0]&int64(int32(mask)), "setOps sets the word's mask as the first version read it")
}
