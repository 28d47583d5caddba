package buffer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// TestHoldEnqueuesLikeAsynq: Hold writes the task itself, in the script that caches the records
// (one round trip). asynq must see exactly what its own client would have written: the task
// with its type, payload, retry limit and timeout, pending in the ingest queue, its TaskID
// taken (asynq's own enqueue conflicts), and its server must deliver it. A repeated write is
// answered with the original transaction and adds no task; a record held under the same id
// with other content is a conflict; a repeated write whose task is gone enqueues it again with
// the original transaction.
func TestHoldEnqueuesLikeAsynq(t *testing.T) {
	rdb, b, insp := newBuffer(t, time.Second)
	ctx := context.Background()
	write := func(tx, hash string) ingest.Write {
		return ingest.Write{
			Tx: tx, TaskType: ingest.TaskFiles, TaskID: "files:test-1",
			Items: []ingest.Item{{Kind: ingest.KindFile, ID: "11111111-1111-4111-8111-111111111111", Hash: hash,
				Record: map[string]string{"path": "a.fits"}, Index: buffer.PackageIndex("p1")}},
			Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx}) },
		}
	}
	const h1, h2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	tx1 := ingest.NewID()

	res, err := b.Hold(ctx, write(tx1, h1))
	require.NoError(t, err)
	require.Equal(t, ingest.HoldResult{Tx: tx1}, res)
	info, err := insp.GetTaskInfo(ingest.Queue, "files:test-1")
	require.NoError(t, err)
	require.Equal(t, ingest.TaskFiles, info.Type)
	require.JSONEq(t, `{"tx":"`+tx1+`"}`, string(info.Payload))
	require.Equal(t, buffer.MaxRetry, info.MaxRetry)
	require.Equal(t, buffer.TaskTimeout, info.Timeout)
	require.Equal(t, asynq.TaskStatePending, info.State)
	require.Equal(t, ingest.Queue, info.Queue)
	queues, err := insp.Queues()
	require.NoError(t, err)
	require.Contains(t, queues, ingest.Queue)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(ingest.TaskFiles, nil), asynq.Queue(ingest.Queue), asynq.TaskID("files:test-1"))
	require.ErrorIs(t, err, asynq.ErrTaskIDConflict)
	cached, err := b.Get(ctx, ingest.KindFile, "11111111-1111-4111-8111-111111111111")
	require.NoError(t, err)
	require.Equal(t, tx1, cached["11111111-1111-4111-8111-111111111111"].Tx)
	require.Equal(t, []string{"11111111-1111-4111-8111-111111111111"}, rdb.SMembers(ctx, buffer.PackageIndex("p1")).Val())

	// The same write again: the original transaction, no second task.
	res, err = b.Hold(ctx, write(ingest.NewID(), h1))
	require.NoError(t, err)
	require.Equal(t, ingest.HoldResult{Tx: tx1, Replayed: true}, res)
	q, err := insp.GetQueueInfo(ingest.Queue)
	require.NoError(t, err)
	require.Equal(t, 1, q.Pending)

	// Another record under the same id.
	_, err = b.Hold(ctx, write(ingest.NewID(), h2))
	var ce *ingest.BufferConflictError
	require.True(t, errors.As(err, &ce), "%v", err)

	// asynq's server takes the task as its own client's.
	got := make(chan []byte, 1)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{ingest.Queue: 1}, Concurrency: 1,
		TaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(ingest.TaskFiles, func(_ context.Context, task *asynq.Task) error {
		got <- task.Payload()
		return nil
	})
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()
	select {
	case p := <-got:
		require.JSONEq(t, `{"tx":"`+tx1+`"}`, string(p))
	case <-time.After(10 * time.Second):
		t.Fatal("asynq's server did not deliver the task")
	}

	// Done and deleted (no worker evicted the records here): the same write again enqueues the
	// task anew, with the original transaction.
	require.Eventually(t, func() bool {
		_, err := insp.GetTaskInfo(ingest.Queue, "files:test-1")
		return errors.Is(err, asynq.ErrTaskNotFound)
	}, 10*time.Second, 20*time.Millisecond)
	res, err = b.Hold(ctx, write(ingest.NewID(), h1))
	require.NoError(t, err)
	require.Equal(t, ingest.HoldResult{Tx: tx1, Replayed: true}, res)
	select {
	case p := <-got:
		require.JSONEq(t, `{"tx":"`+tx1+`"}`, string(p))
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not enqueued again")
	}
}

// fileWrite is a single-file registration of file id, whose record hashes to hash, in a new
// transaction.
// newBuffer is a buffer with the given round-trip timeout on a private Redis, that Redis'
// client, and asynq's inspector on it.
func newBuffer(t *testing.T, timeout time.Duration) (*redis.Client, *buffer.Buffer, *asynq.Inspector) {
	t.Helper()
	rdb := testenv.Redis(t).Client()
	return rdb, buffer.New(rdb, timeout), asynq.NewInspectorFromRedisClient(rdb)
}

func fileWrite(id, hash string) ingest.Write {
	return ingest.Write{
		Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "file:" + id,
		Items:   []ingest.Item{{Kind: ingest.KindFile, ID: id, Hash: hash, Record: map[string]string{"id": id}}},
		Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx, "id": id}) },
	}
}

// TestHoldCoalescesWrites: writes held at the same moment share a round — one script call and
// one ingest:writes task whose payload carries each write as its own task would have (type,
// payload with its transaction) — while each caller still gets its own answer: new, a replay of
// an identical write (even one held in the same round), or a conflict. A write larger than a
// round's share is held alone, with its own task.
func TestHoldCoalescesWrites(t *testing.T) {
	_, b, insp := newBuffer(t, 5*time.Second)
	ctx := context.Background()
	const h1, h2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ingest.NewID()
	}
	type answer struct {
		res ingest.HoldResult
		err error
	}
	answers := make([]answer, n+2)
	var wg sync.WaitGroup
	for i := range n + 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i {
			case n: // the same record as write 0, identical: a replay of write 0
				answers[i].res, answers[i].err = b.Hold(ctx, fileWrite(ids[0], h1))
			case n + 1: // the same id as write 1, other content: one of the two conflicts
				answers[i].res, answers[i].err = b.Hold(ctx, fileWrite(ids[1], h2))
			default:
				answers[i].res, answers[i].err = b.Hold(ctx, fileWrite(ids[i], h1))
			}
		}()
	}
	wg.Wait()
	conflicts := 0
	for i, a := range answers {
		var ce *ingest.BufferConflictError
		if errors.As(a.err, &ce) {
			conflicts++
			require.Contains(t, []int{1, n + 1}, i)
			continue
		}
		require.NoError(t, a.err, "write %d", i)
	}
	require.Equal(t, 1, conflicts, "two different records under one id: exactly one is refused")
	require.True(t, answers[0].res.Replayed || answers[n].res.Replayed, "an identical write is a replay")
	require.Equal(t, answers[0].res.Tx, answers[n].res.Tx, "the replay answers the original transaction")

	// Fewer tasks than writes, and every accepted write in exactly one of them, with its
	// transaction; a replay or a refused write in none.
	q, err := insp.GetQueueInfo(ingest.Queue)
	require.NoError(t, err)
	require.Less(t, q.Pending, n, "concurrent writes share tasks")
	tasks, err := insp.ListPendingTasks(ingest.Queue, asynq.PageSize(n+2))
	require.NoError(t, err)
	seen := map[string]string{} // record id -> tx
	coalesced := 0
	for _, task := range tasks {
		var subs []ingest.SubWrite
		switch task.Type {
		case ingest.TaskWrites:
			coalesced++
			var p ingest.WritesTask
			require.NoError(t, json.Unmarshal(task.Payload, &p))
			require.Greater(t, len(p.Writes), 1)
			subs = p.Writes
		case ingest.TaskFiles:
			subs = []ingest.SubWrite{{Type: task.Type, Payload: task.Payload}}
		default:
			t.Fatalf("unexpected task type %s", task.Type)
		}
		require.Equal(t, buffer.MaxRetry, task.MaxRetry)
		require.Equal(t, buffer.TaskTimeout, task.Timeout)
		for _, s := range subs {
			require.Equal(t, ingest.TaskFiles, s.Type)
			var p struct{ Tx, ID string }
			require.NoError(t, json.Unmarshal(s.Payload, &p))
			_, dup := seen[p.ID]
			require.False(t, dup, "record %s in two tasks", p.ID)
			seen[p.ID] = p.Tx
		}
	}
	require.Positive(t, coalesced, "at least one round held several writes")
	require.Len(t, seen, n, "every accepted write is queued once")
	for i := range n {
		if answers[i].err == nil {
			require.Equal(t, answers[i].res.Tx, seen[ids[i]], "write %d queued with its transaction", i)
		}
	}

	// Each coalesced write's receipt names the task that holds it.
	rc, err := b.Receipt(ctx, answers[2].res.Tx)
	require.NoError(t, err)
	require.Equal(t, ingest.TxBuffered, rc.State)

	// A large write (more records than a round takes from one write) is held alone.
	big := ingest.Write{Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "files:big",
		Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx}) }}
	for range 100 {
		big.Items = append(big.Items, ingest.Item{Kind: ingest.KindFile, ID: ingest.NewID(), Hash: h1, Record: map[string]string{}})
	}
	_, err = b.Hold(ctx, big)
	require.NoError(t, err)
	info, err := insp.GetTaskInfo(ingest.Queue, "files:big")
	require.NoError(t, err)
	require.Equal(t, ingest.TaskFiles, info.Type)
}

// TestHoldAfterScriptCacheLoss: a Redis that lost its script cache (restarted, SCRIPT FLUSH)
// answers the hold script's EVALSHA with NOSCRIPT; Hold then sends the whole script and the
// write is held and queued — for a write alone and for a round of several.
func TestHoldAfterScriptCacheLoss(t *testing.T) {
	rdb, b, insp := newBuffer(t, 5*time.Second)
	ctx := context.Background()
	hold := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = b.Hold(ctx, fileWrite(ingest.NewID(), "0123456789abcdef0123456789abcdef"))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	hold(1)
	for _, n := range []int{1, 50} {
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		hold(n)
	}
	held := 0
	tasks, err := insp.ListPendingTasks(ingest.Queue, asynq.PageSize(1000))
	require.NoError(t, err)
	for _, task := range tasks {
		if task.Type == ingest.TaskWrites {
			var p ingest.WritesTask
			require.NoError(t, json.Unmarshal(task.Payload, &p))
			held += len(p.Writes)
		} else {
			held++
		}
	}
	require.Equal(t, 52, held, "every write held is queued once")
}

// TestReclaimOrphans: a task left active with an expired lease (its worker died, or the reply of
// its dequeue was lost with Redis) goes back to the pending list, ready for any worker, while a
// task whose lease is current stays with its worker; asynq's inspector reads both as expected.
func TestReclaimOrphans(t *testing.T) {
	rdb, b, insp := newBuffer(t, time.Second)
	ctx := context.Background()
	for i, id := range []string{"orphan", "alive"} {
		w := fileWrite(fmt.Sprintf("%08d-1111-4111-8111-111111111111", i), "0123456789abcdef0123456789abcdef")
		w.TaskID = "files:" + id
		_, err := b.Hold(ctx, w)
		require.NoError(t, err)
	}
	// Both taken by a worker, as asynq v0.26's dequeue does: off the pending list onto the
	// active one, a lease in unix seconds, state active. The orphan's lease ended a minute ago.
	now := time.Now()
	for id, lease := range map[string]time.Time{"files:orphan": now.Add(-time.Minute), "files:alive": now.Add(25 * time.Second)} {
		require.NoError(t, rdb.LRem(ctx, "asynq:{ingest}:pending", 0, id).Err())
		require.NoError(t, rdb.LPush(ctx, "asynq:{ingest}:active", id).Err())
		require.NoError(t, rdb.ZAdd(ctx, "asynq:{ingest}:lease", redis.Z{Score: float64(lease.Unix()), Member: id}).Err())
		require.NoError(t, rdb.HSet(ctx, "asynq:{ingest}:t:"+id, "state", "active").Err())
	}
	state := func(id string) asynq.TaskState {
		info, err := insp.GetTaskInfo(ingest.Queue, id)
		require.NoError(t, err)
		return info.State
	}
	require.Equal(t, asynq.TaskStateActive, state("files:orphan"))

	n, err := b.ReclaimOrphans(ctx, now.Add(-10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, asynq.TaskStatePending, state("files:orphan"))
	require.Equal(t, asynq.TaskStateActive, state("files:alive"))
	require.Equal(t, []string{"files:orphan"}, rdb.LRange(ctx, "asynq:{ingest}:pending", 0, -1).Val())
	require.Zero(t, rdb.ZScore(ctx, "asynq:{ingest}:lease", "files:orphan").Val())

	// Nothing more to take back: a second pass changes nothing.
	n, err = b.ReclaimOrphans(ctx, now.Add(-10*time.Second))
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, asynq.TaskStateActive, state("files:alive"))
}

// filesWrite is one write of files ids, each with its hash and, if pkg is set, in that
// package's index.
func filesWrite(pkg string, ids []string, hashes []string) ingest.Write {
	w := ingest.Write{Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: "files:" + ids[0],
		Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]any{"tx": tx, "ids": ids}) }}
	for i, id := range ids {
		it := ingest.Item{Kind: ingest.KindFile, ID: id, Hash: hashes[i], Record: map[string]string{"id": id}}
		if pkg != "" {
			it.Index = buffer.PackageIndex(pkg)
		}
		w.Items = append(w.Items, it)
	}
	return w
}

// TestHoldOverlappingWrites: a write some of whose records are held already, identical, caches
// only the others under its own transaction; one with a different record under a held id caches
// nothing; a write of more than 1,000 records (the script's chunk) is held, replayed and refused
// as a whole; Forget takes records and their index entries out of the cache.
func TestHoldOverlappingWrites(t *testing.T) {
	rdb, b, _ := newBuffer(t, 5*time.Second)
	ctx := context.Background()
	const h1, h2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	f := make([]string, 5)
	for i := range f {
		f[i] = ingest.NewID()
	}
	a := filesWrite("", f[0:2], []string{h1, h1})
	_, err := b.Hold(ctx, a)
	require.NoError(t, err)
	bw := filesWrite("", f[1:3], []string{h1, h1})
	res, err := b.Hold(ctx, bw)
	require.NoError(t, err)
	require.False(t, res.Replayed, "a write with a new record is new")
	got, err := b.Get(ctx, ingest.KindFile, f[0], f[1], f[2])
	require.NoError(t, err)
	require.Equal(t, a.Tx, got[f[1]].Tx, "a record held already keeps its transaction")
	require.Equal(t, bw.Tx, got[f[2]].Tx)

	_, err = b.Hold(ctx, filesWrite("", []string{f[3], f[2]}, []string{h1, h2}))
	var ce *ingest.BufferConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 1, ce.Index)
	held, err := b.Exists(ctx, ingest.KindFile, f[3])
	require.NoError(t, err)
	require.Empty(t, held, "a refused write caches nothing")

	res, err = b.Hold(ctx, filesWrite("", f[0:2], []string{h1, h1}))
	require.NoError(t, err)
	require.Equal(t, ingest.HoldResult{Tx: a.Tx, Replayed: true}, res)

	pkg := ingest.NewID()
	big := make([]string, 2500)
	hashes := make([]string, len(big))
	for i := range big {
		big[i], hashes[i] = ingest.NewID(), h1
	}
	bigWrite := filesWrite(pkg, big, hashes)
	_, err = b.Hold(ctx, bigWrite)
	require.NoError(t, err)
	require.EqualValues(t, 3+len(big), rdb.HLen(ctx, "ingest:rec:file").Val())
	require.EqualValues(t, len(big), rdb.SCard(ctx, buffer.PackageIndex(pkg)).Val())
	res, err = b.Hold(ctx, filesWrite(pkg, big, hashes))
	require.NoError(t, err)
	require.Equal(t, ingest.HoldResult{Tx: bigWrite.Tx, Replayed: true}, res, "the same 2,500 records again: a replay")
	hashes[2400] = h2
	_, err = b.Hold(ctx, filesWrite(pkg, append(big[:2499:2499], f[4]), hashes))
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 2400, ce.Index, "a conflict past the first chunk is found")
	got, err = b.Get(ctx, ingest.KindFile, big...)
	require.NoError(t, err)
	require.Len(t, got, len(big))

	require.NoError(t, b.Forget(ctx, bigWrite.Items))
	require.EqualValues(t, 3, rdb.HLen(ctx, "ingest:rec:file").Val())
	require.Zero(t, rdb.Exists(ctx, buffer.PackageIndex(pkg)).Val())
}
