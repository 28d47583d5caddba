package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/postgres"
)

func testHandler(t *testing.T) *Handler {
	t.Helper()
	db, err := database.Open(testenv.Database(t), 4)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &Handler{Apply: &postgres.Applier{DB: db, BatchRows: 3}, Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), gate: &gate{}}
}

func seedObsUnit(t *testing.T, h *Handler) int64 {
	t.Helper()
	db := h.Apply.DB
	var src, prog, ou int64
	require.NoError(t, db.QueryRow(`INSERT INTO sources (name, kind, ra_deg, dec_deg) VALUES ('s', 'fixed', 1, 2) RETURNING id`).Scan(&src))
	require.NoError(t, db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi) VALUES ('p', 't', 'pi') RETURNING id`).Scan(&prog))
	require.NoError(t, db.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, 'u', $2, 11, 60) RETURNING id`, prog, src).Scan(&ou))
	return ou
}

func filesTask(eou string, n int) *ingest.FilesTask {
	ft := &ingest.FilesTask{Envelope: ingest.Envelope{TxID: ingest.NewID(), AcceptedAt: time.Now().UTC()}}
	for range n {
		ft.Files = append(ft.Files, ingest.File{ID: ingest.NewID(), ExecutedObsUnitID: eou, InstrumentModuleID: 11,
			Path: "f/" + ingest.NewID(), SizeBytes: 1, Checksum: "xxh64:0123456789abcdef", Meta: []byte(`{}`)})
	}
	return ft
}

func jobsOf(works ...postgres.Work) ([]*job, int) {
	var jobs []*job
	rows := 0
	for _, w := range works {
		jobs = append(jobs, &job{works: []postgres.Work{w}, rows: w.Rows(), done: make(chan result, 1)})
		rows += w.Rows()
	}
	return jobs, rows
}

// TestBatchSharesOneTransaction: the tasks of a batch commit together (one commit position), the
// files of several tasks in INSERTs of BatchRows rows, each row with its own task's transaction.
func TestBatchSharesOneTransaction(t *testing.T) {
	h := testHandler(t)
	ou := seedObsUnit(t, h)
	eou := ingest.NewID()
	start := &ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{ID: eou, ObsUnitID: ou, InstrumentModuleID: 11, Site: "s", StartTime: time.Now().UTC(), Meta: []byte(`{}`)}}
	a, b := filesTask(eou, 2), filesTask(eou, 5)
	jobs, rows := jobsOf(postgres.Work{Start: start}, postgres.Work{Files: a}, postgres.Work{Files: b})
	h.applyBatch(context.Background(), jobs, rows)
	var lsns []string
	for _, j := range jobs {
		r := <-j.done
		require.NoError(t, r.err)
		lsns = append(lsns, r.c.LSN)
	}
	require.NotEmpty(t, lsns[0])
	require.Equal(t, []string{lsns[0], lsns[0], lsns[0]}, lsns, "one commit for the batch")
	var n int
	require.NoError(t, h.Apply.DB.QueryRow(`SELECT count(*) FROM raw_data_files WHERE tx = $1`, b.TxID).Scan(&n))
	require.Equal(t, 5, n, "each row carries its own task's transaction")
	require.NoError(t, h.Apply.DB.QueryRow(`SELECT count(*) FROM raw_data_files WHERE tx = $1`, a.TxID).Scan(&n))
	require.Equal(t, 2, n)
}

// TestBatchIsolatesTaskThatCannotApply: a task that can never apply (its obs unit does not exist)
// in a batch makes each task apply alone: it alone fails, permanently; the others commit.
func TestBatchIsolatesTaskThatCannotApply(t *testing.T) {
	h := testHandler(t)
	ou := seedObsUnit(t, h)
	good := &ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{ID: ingest.NewID(), ObsUnitID: ou, InstrumentModuleID: 11, Site: "s", StartTime: time.Now().UTC(), Meta: []byte(`{}`)}}
	orphan := &ingest.StartTask{Envelope: ingest.Envelope{TxID: ingest.NewID()}, Start: ingest.Start{ID: ingest.NewID(), ObsUnitID: ou + 1000, InstrumentModuleID: 11, Site: "s", StartTime: time.Now().UTC(), Meta: []byte(`{}`)}}
	files := filesTask(good.Start.ID, 4)
	jobs, rows := jobsOf(postgres.Work{Start: good}, postgres.Work{Start: orphan}, postgres.Work{Files: files})
	h.applyBatch(context.Background(), jobs, rows)
	require.NoError(t, (<-jobs[0].done).err)
	err := (<-jobs[1].done).err
	var pe *ingest.PermanentError
	require.True(t, errors.As(err, &pe), "the orphan fails permanently: %v", err)
	require.Equal(t, classPermanent, classOf(err))
	require.NoError(t, (<-jobs[2].done).err)
	var n int
	require.NoError(t, h.Apply.DB.QueryRow(`SELECT count(*) FROM raw_data_files WHERE tx = $1`, files.TxID).Scan(&n))
	require.Equal(t, 4, n)
	require.Nil(t, h.gate.waitChan(), "a data error says nothing about reachability")
}

// TestGate: closed by an unreachable database, a task waits until it opens, or gives up (to be
// retried) shortly before its deadline; connection errors count as unreachable, statement
// errors do not.
func TestGate(t *testing.T) {
	g := &gate{}
	require.NoError(t, g.wait(context.Background(), nil), "open: no wait")
	require.True(t, g.close())
	require.False(t, g.close())
	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background(), nil) }()
	select {
	case err := <-done:
		t.Fatalf("returned while closed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.open()
	require.NoError(t, <-done)

	g.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	require.ErrorIs(t, g.wait(ctx, nil), errUnreachable)
	require.Less(t, time.Since(begin), 2*time.Second, "gives up 5 s before the task's deadline")
	stopping := make(chan struct{})
	close(stopping)
	require.ErrorIs(t, g.wait(context.Background(), stopping), errStopping)

	require.True(t, unreachable(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")))
	require.True(t, unreachable(&pq.Error{Code: "57P01"}), "admin shutdown")
	require.True(t, unreachable(&pq.Error{Code: "08006"}), "connection failure")
	require.False(t, unreachable(&pq.Error{Code: "23503"}))
	require.False(t, unreachable(&ingest.PermanentError{Err: errors.New("x")}))
	require.False(t, unreachable(context.Canceled))
}
