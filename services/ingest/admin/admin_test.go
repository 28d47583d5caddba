package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/admin"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// TestDropDeadLetter: `dead-letters drop --id` refuses a task a worker is applying right now and
// leaves its record readable; once the task is a dead letter, the drop deletes it and takes its
// record and index entry out of the read cache.
func TestDropDeadLetter(t *testing.T) {
	ctx := context.Background()
	srvRedis := testenv.Redis(t)
	rdb := srvRedis.Client()
	b := buffer.New(rdb, 5*time.Second)
	id, ou := ingest.NewID(), int64(7)
	task := ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{ID: id, ObsUnitID: ou}}
	_, err := b.Hold(ctx, ingest.Write{Tx: task.TxID, TaskType: ingest.TaskStart, TaskID: ingest.StartTaskID(id),
		Items:   []ingest.Item{{Kind: ingest.KindStart, ID: id, Hash: "0123456789abcdef0123456789abcdef", Record: task.Start, Index: buffer.OUIndex(ou)}},
		Payload: func(string) ([]byte, error) { return json.Marshal(task) }})
	require.NoError(t, err)

	applying, release := make(chan struct{}), make(chan struct{})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{ingest.Queue: 1}, Concurrency: 1,
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(ingest.TaskStart, func(context.Context, *asynq.Task) error {
		close(applying)
		<-release
		return asynq.SkipRetry // a write that can never apply: archived at once
	})
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()
	<-applying

	cfg := &ingest.Config{}
	cfg.RedisURL = srvRedis.URL
	drop := func() error {
		var out, errs bytes.Buffer
		return admin.Run(ctx, cfg, []string{"dead-letters", "drop", "--id", ingest.StartTaskID(id)}, &out, &errs)
	}
	cached := func() bool { return rdb.HExists(ctx, "ingest:rec:start", id).Val() }
	require.ErrorContains(t, drop(), "being applied")
	require.True(t, cached(), "a refused drop leaves the record readable")

	close(release)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.Eventually(t, func() bool {
		ti, err := insp.GetTaskInfo(ingest.Queue, ingest.StartTaskID(id))
		return err == nil && ti.State == asynq.TaskStateArchived
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, drop())
	require.False(t, cached(), "a dropped dead letter leaves the read cache")
	require.Zero(t, rdb.Exists(ctx, buffer.OUIndex(ou)).Val(), "and its index")
	_, err = insp.GetTaskInfo(ingest.Queue, ingest.StartTaskID(id))
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)
}
