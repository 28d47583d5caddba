package buffer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// TestHoldRoundSeesItsOwnWrites: holdScript asks Redis what is held once for all the writes of a
// call and sets what it accepts at the end, so a write must see the records and claims of the
// writes accepted before it in the same call exactly as if they were in Redis already. One call
// (holdRound, not Hold: the round is made here, not left to timing) holds, in order: a file
// claiming a path (new), another id claiming that path (claimed by the first), the first again
// under a new transaction (a replay of the first's), another record under the first's id
// (conflict), a start with an index entry (new, in another hash), a write of the first file
// again and a new one claiming a second path (new: only the new record is added), and a third
// id claiming that second path (claimed by the record accepted one write before). Then Redis
// holds exactly the accepted records and claims and one task with the three accepted writes.
func TestHoldRoundSeesItsOwnWrites(t *testing.T) {
	rdb := testenv.Redis(t).Client()
	b := New(rdb, time.Second)
	ctx := context.Background()
	const h1, h2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	item := func(kind, id, hash string, claims ...ingest.Claim) ingest.Item {
		return ingest.Item{Kind: kind, ID: id, Hash: hash, Record: map[string]string{"id": id}, Claims: claims}
	}
	write := func(taskType string, items ...ingest.Item) *heldWrite {
		return &heldWrite{w: ingest.Write{Tx: ingest.NewID(), TaskType: taskType, TaskID: "t:" + ingest.NewID(), Items: items,
			Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx}) }}}
	}
	a, bID, e, f, s := ingest.NewID(), ingest.NewID(), ingest.NewID(), ingest.NewID(), ingest.NewID()
	p, q := ingest.Claim{Key: "path:11:/p.fits", Owner: a}, ingest.Claim{Key: "path:11:/q.fits", Owner: e}
	start := item(ingest.KindStart, s, h1)
	start.Index = OUIndex(9)
	r := &holdRound{writes: []*heldWrite{
		write(ingest.TaskFiles, item(ingest.KindFile, a, h1, p)),
		write(ingest.TaskFiles, item(ingest.KindFile, bID, h1, ingest.Claim{Key: p.Key, Owner: bID})),
		write(ingest.TaskFiles, item(ingest.KindFile, a, h1, p)),
		write(ingest.TaskFiles, item(ingest.KindFile, a, h2, p)),
		write(ingest.TaskStart, start),
		write(ingest.TaskFiles, item(ingest.KindFile, a, h1, p), item(ingest.KindFile, e, h1, q)),
		write(ingest.TaskFiles, item(ingest.KindFile, f, h1, ingest.Claim{Key: q.Key, Owner: f})),
	}}
	b.holdRound(r)

	type outcome struct{ outcome, detail string }
	var got []outcome
	for _, hw := range r.writes {
		require.NoError(t, hw.err)
		got = append(got, outcome{hw.outcome, hw.detail})
	}
	first := r.writes[0].w.Tx
	require.Equal(t, []outcome{
		{"new", ""}, {"claimed", "1|" + a}, {"replay", first}, {"conflict", "1"}, {"new", ""}, {"new", ""}, {"claimed", "1|" + e},
	}, got)

	files := rdb.HGetAll(ctx, recHash(ingest.KindFile)).Val()
	require.Len(t, files, 2, "the two accepted files, nothing of the refused writes")
	require.Equal(t, h1+"|"+first+"|", files[a][:len(h1)+len(first)+2], "the first file as its first write held it")
	require.Equal(t, h1+"|"+r.writes[5].w.Tx+"|", files[e][:len(h1)+36+2])
	require.True(t, rdb.HExists(ctx, recHash(ingest.KindStart), s).Val())
	require.True(t, rdb.SIsMember(ctx, OUIndex(9), s).Val())
	require.Equal(t, map[string]string{p.Key: a, q.Key: e}, rdb.HGetAll(ctx, claimsKey).Val())
	for i, hw := range r.writes {
		require.Equal(t, hw.outcome == "new", rdb.Exists(ctx, txPrefix+hw.w.Tx).Val() == 1, "write %d's receipt", i)
	}

	tasks, err := asynq.NewInspectorFromRedisClient(rdb).ListPendingTasks(ingest.Queue)
	require.NoError(t, err)
	require.Len(t, tasks, 1, "one task for the call")
	var wt ingest.WritesTask
	require.NoError(t, json.Unmarshal(tasks[0].Payload, &wt))
	require.Len(t, wt.Writes, 3, "the three accepted writes")
}
