package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// TestProbeRound: the committed filter as a round asks it (one read-only BITFIELD_RO). Not
// built, every probe is unchecked; built, a new key passes, a learnt one (LearnCommitted, or a
// write held by Hold, which sets its keys in the script's round trip) is unchecked; a checked
// write is not read at all; two writes of one new key in one round both pass (the claims decide
// between them, as between rounds); keys without Probe are set, never judged.
func TestProbeRound(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	write := func(checked bool, keys ...string) *heldWrite {
		id := ingest.NewID()
		it := ingest.Item{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef", Record: map[string]string{"id": id}}
		for _, k := range keys {
			it.Unique = append(it.Unique, ingest.Unique{Key: k, Probe: true})
		}
		return &heldWrite{w: ingest.Write{Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "files:" + id, Items: []ingest.Item{it}, Checked: checked,
			Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx, "id": id}) }}}
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

	require.Equal(t, []bool{false}, probe(write(false, "path:1:a")), "reading sets nothing")
	require.Equal(t, []bool{false, false}, probe(write(false, "path:1:b"), write(false, "path:1:b")), "one round: the claims decide")
	require.Nil(t, probe(write(true, "path:1:c")), "checked: not read")

	require.NoError(t, b.LearnCommitted(ctx, []ingest.Item{{Unique: []ingest.Unique{{Key: "path:2:x"}}}}))
	require.Equal(t, []bool{true}, probe(write(false, "path:2:x")))
	require.Equal(t, []bool{false, true}, probe(write(false, "path:2:new"), write(false, "path:2:new2", "path:2:x")), "one key that may be taken is enough")

	// Hold sets the keys of what it holds (and of a checked write, which it only learns).
	for _, hw := range []*heldWrite{write(false, "path:3:held"), write(true, "path:3:checked")} {
		_, err := b.Hold(ctx, hw.w)
		require.NoError(t, err)
	}
	require.Equal(t, []bool{true, true}, probe(write(false, "path:3:held"), write(false, "path:3:checked")))
	_, err = b.Hold(ctx, write(false, "path:3:held").w)
	require.ErrorIs(t, err, ingest.ErrUnchecked)

	noProbe := write(false)
	noProbe.w.Items[0].Unique = []ingest.Unique{{Key: "path:4:y"}}
	require.Nil(t, probe(noProbe), "learnt only: nothing to read")
	require.Nil(t, setKeys([]*heldWrite{{w: ingest.Write{Items: []ingest.Item{{ID: "x"}}}}}), "no keys: no command")

	// Many keys in one round, as a bulk registration: none of 5,000 new paths is a false positive
	// here, and all are taken once set.
	many := write(false)
	var keys []string
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("path:5:/data/2026-11-28/scan%04d/file%06d.fits", i/100, i))
	}
	for _, k := range keys {
		many.w.Items[0].Unique = append(many.w.Items[0].Unique, ingest.Unique{Key: k, Probe: true})
	}
	require.Equal(t, []bool{false}, probe(many))
	require.NoError(t, rdb.Do(ctx, setKeys([]*heldWrite{many})...).Err())
	for _, k := range keys[:50] {
		require.Equal(t, []bool{true}, probe(write(false, k)), k)
	}
}

// TestFilterLayoutOfFirstVersion: the filter's first version set a key's mask as the big-endian
// 32-bit integer at word "#w" (BITFIELD … i32 #w, from Lua); bitOps sets and reads the same
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
	require.Equal(t, int64(int32(mask)), v[0]&int64(int32(mask)), "bitOps sets the word's mask as the first version read it")
}
