package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/migrations"
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

// TestCheck: `ingest admin check` (the real binary) over a consistent database prints that every
// invariant holds and exits 0; over one holding an execution that ends before it starts it
// names the invariant and the execution, and exits 1.
func TestCheck(t *testing.T) {
	dsn := testenv.Database(t)
	run := func() (string, string, int) {
		cmd := exec.Command(testenv.Binary(t, "ingest"), "admin", "check")
		cmd.Env = []string{"OPS_DATABASE_URL=" + dsn}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	invs, err := migrations.Invariants()
	require.NoError(t, err)
	out, errs, code := run()
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errs)
	require.Equal(t, fmt.Sprintf("all %d invariants hold\n", len(invs)), out)

	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	defer db.Close()
	const bad = "0193c0de-0000-7000-8000-0000000000c1"
	_, err = db.Exec(`ALTER TABLE executed_obs_units DROP CONSTRAINT executed_obs_units_ends_after_start`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO executed_obs_units (id, start_time, end_time) VALUES ($1, '2026-11-25T05:00:00Z', '2026-11-25T04:00:00Z')`, bad)
	require.NoError(t, err)
	out, errs, code = run()
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", out, errs)
	require.Contains(t, out, "executions_end_before_start: 1 violation(s): Executions that end before they start")
	require.Contains(t, out, "  "+bad+"  start_time 2026-11-25 05:00:00")
	require.Contains(t, out, fmt.Sprintf("1 of %d invariants violated, 1 violation(s)", len(invs)))
	require.Contains(t, errs, "invariants violated")
}
