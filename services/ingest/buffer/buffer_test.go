package buffer_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
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
	r := testenv.Redis(t)
	rdb := r.Client()
	ctx := context.Background()
	b := buffer.New(rdb, time.Second)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	write := func(tx, hash string) buffer.Write {
		return buffer.Write{
			Tx: tx, TaskType: ingest.TaskFiles, TaskID: "files:test-1",
			Items: []buffer.Item{{Kind: buffer.KindFile, ID: "11111111-1111-4111-8111-111111111111", Hash: hash,
				Record: map[string]string{"path": "a.fits"}, Index: buffer.PackageIndex("p1")}},
			Payload: func(tx string) ([]byte, error) { return json.Marshal(map[string]string{"tx": tx}) },
		}
	}
	const h1, h2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	tx1 := ingest.NewID()

	res, err := b.Hold(ctx, write(tx1, h1))
	require.NoError(t, err)
	require.Equal(t, buffer.Result{Tx: tx1}, res)
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
	cached, err := b.Get(ctx, buffer.KindFile, "11111111-1111-4111-8111-111111111111")
	require.NoError(t, err)
	require.Equal(t, tx1, cached["11111111-1111-4111-8111-111111111111"].Tx)
	require.Equal(t, []string{"11111111-1111-4111-8111-111111111111"}, rdb.SMembers(ctx, buffer.PackageIndex("p1")).Val())

	// The same write again: the original transaction, no second task.
	res, err = b.Hold(ctx, write(ingest.NewID(), h1))
	require.NoError(t, err)
	require.Equal(t, buffer.Result{Tx: tx1, Replayed: true}, res)
	q, err := insp.GetQueueInfo(ingest.Queue)
	require.NoError(t, err)
	require.Equal(t, 1, q.Pending)

	// Another record under the same id.
	_, err = b.Hold(ctx, write(ingest.NewID(), h2))
	var ce *buffer.ConflictError
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
	require.Equal(t, buffer.Result{Tx: tx1, Replayed: true}, res)
	select {
	case p := <-got:
		require.JSONEq(t, `{"tx":"`+tx1+`"}`, string(p))
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not enqueued again")
	}
}
