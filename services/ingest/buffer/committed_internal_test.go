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

// TestCommittedProbes: the committed filter as the hold script asks it. Not built, every probe
// is "check"; built, a write of new keys is held and its keys are set in the same round trip, so
// the same key again is "check"; one key that may be taken is enough; a checked write is held
// and only sets its keys; learnt keys (LearnCommitted) are "check"; two writes of one new key in
// one round both pass the filter (their claims decide between them, as between rounds); keys
// without Probe are set, never judged; a bulk of 5,000 new keys (several BITFIELD_RO calls) passes.
func TestCommittedProbes(t *testing.T) {
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
	hold := func(hw *heldWrite) error {
		_, err := b.Hold(ctx, hw.w)
		return err
	}
	round := func(ws ...*heldWrite) []string {
		b.holdRound(&holdRound{writes: ws})
		var out []string
		for _, hw := range ws {
			require.NoError(t, hw.err)
			out = append(out, hw.outcome)
		}
		return out
	}

	require.ErrorIs(t, hold(write(false, "path:1:a")), ingest.ErrUnchecked, "not built: the database decides")
	require.NoError(t, b.learn(ctx, nil, true))
	built, err := b.CommittedBuilt(ctx)
	require.NoError(t, err)
	require.True(t, built)

	require.ErrorIs(t, hold(write(false, "path:1:a")), ingest.ErrUnchecked, "set by the unbuilt round")
	require.NoError(t, hold(write(false, "path:1:b")))
	require.ErrorIs(t, hold(write(false, "path:1:b")), ingest.ErrUnchecked, "set when held")
	require.ErrorIs(t, hold(write(false, "path:1:new", "path:1:b")), ingest.ErrUnchecked, "one key that may be taken is enough")
	require.NoError(t, hold(write(true, "path:1:b")), "checked: held")
	require.NoError(t, hold(write(true, "path:1:c")))
	require.ErrorIs(t, hold(write(false, "path:1:c")), ingest.ErrUnchecked, "a checked write's keys are set")

	require.NoError(t, b.LearnCommitted(ctx, []ingest.Item{{Unique: []ingest.Unique{{Key: "path:2:x"}}}}))
	require.ErrorIs(t, hold(write(false, "path:2:x")), ingest.ErrUnchecked)
	require.Equal(t, []string{"new", "new", "check"}, round(write(false, "path:2:y"), write(false, "path:2:y"), write(false, "path:2:x")),
		"one round: the filter reads the bits as they were before it")

	noProbe := write(false)
	noProbe.w.Items[0].Unique = []ingest.Unique{{Key: "path:3:z"}}
	require.NoError(t, hold(noProbe), "learnt only")
	require.ErrorIs(t, hold(write(false, "path:3:z")), ingest.ErrUnchecked)
	require.Nil(t, setKeys([]*heldWrite{{w: ingest.Write{Items: []ingest.Item{{ID: "x"}}}}}), "no keys: no command")

	// A bulk registration: 5,000 new paths, read 1,000 per BITFIELD_RO; none is a false positive
	// here, and all are taken once held.
	var keys []string
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("path:5:/data/2026-11-28/scan%04d/file%06d.fits", i/100, i))
	}
	many := write(false, keys...)
	require.NoError(t, hold(many))
	for _, k := range keys[:50] {
		require.ErrorIs(t, hold(write(false, k)), ingest.ErrUnchecked, k)
	}
	require.ErrorIs(t, hold(write(false, "path:5:also-new", keys[4999])), ingest.ErrUnchecked, "the last chunk's keys are read")

	// A write of more records than a round's share is read before its round (probeLarge): held
	// when new, its keys set; "check" when one record's key is taken.
	large := func(prefix string, n int, extra ...string) *heldWrite {
		hw := write(false)
		hw.w.Items = nil
		for i := range n {
			id := ingest.NewID()
			hw.w.Items = append(hw.w.Items, ingest.Item{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef",
				Record: map[string]string{"id": id}, Unique: []ingest.Unique{{Key: fmt.Sprintf("%s/%d", prefix, i), Probe: true}}})
		}
		for _, k := range extra {
			id := ingest.NewID()
			hw.w.Items = append(hw.w.Items, ingest.Item{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef",
				Record: map[string]string{"id": id}, Unique: []ingest.Unique{{Key: k, Probe: true}}})
		}
		return hw
	}
	require.NoError(t, hold(large("path:6:bulk", 1000)))
	require.ErrorIs(t, hold(write(false, "path:6:bulk/999")), ingest.ErrUnchecked)
	require.ErrorIs(t, hold(large("path:6:other", 500, "path:6:bulk/7")), ingest.ErrUnchecked)
	checked := large("path:6:checked", 200, "path:6:bulk/8")
	checked.w.Checked = true
	require.NoError(t, hold(checked))
	require.ErrorIs(t, hold(write(false, "path:6:checked/199")), ingest.ErrUnchecked)
}

// TestFilterLayoutOfFirstVersion: the filter's first version set a key's mask as the big-endian
// 32-bit integer at word "#w" (BITFIELD … i32 #w, from Lua); setOps sets the same
// bits one by one, so a filter it built stays valid after an upgrade.
func TestFilterLayoutOfFirstVersion(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	require.NoError(t, b.learn(ctx, nil, true))
	const old, fresh = "path:7:/old/as/the/first/version/wrote/it.fits", "path:7:/new/through/setops.fits"
	word, mask := filterBits(old)
	require.NoError(t, rdb.Do(ctx, "BITFIELD", committedKey, "SET", "i32", fmt.Sprintf("#%d", word), int64(int32(mask))).Err())
	id := ingest.NewID()
	w := ingest.Write{Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "files:" + id,
		Items:   []ingest.Item{{Kind: ingest.KindFile, ID: id, Hash: "0123456789abcdef0123456789abcdef", Record: map[string]string{"id": id}, Unique: []ingest.Unique{{Key: old, Probe: true}}}},
		Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx}) }}
	_, err := b.Hold(ctx, w)
	require.ErrorIs(t, err, ingest.ErrUnchecked, "a key the first version set is taken")

	require.NoError(t, b.learn(ctx, []string{fresh}, false))
	word, mask = filterBits(fresh)
	v, err := rdb.Do(ctx, "BITFIELD", committedKey, "GET", "i32", fmt.Sprintf("#%d", word)).Int64Slice()
	require.NoError(t, err)
	require.Equal(t, int64(int32(mask)), v[0]&int64(int32(mask)), "setOps sets the word's mask as the first version read it")
}
