package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
	"github.com/obsops/obsops/services/transfer/postgres"
)

var allKinds = []transfer.Kind{transfer.KindRawDataPackage, transfer.KindDataTransferPackage, transfer.KindTransfer, transfer.KindUnpack, transfer.KindLongTermArchive}

func count(t *testing.T, e *transfertest.Env, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.DB.Get(&n, q, args...))
	return n
}

// The planner's whole chain, step by step, and that every step is idempotent.
func TestPlannerChainIsIdempotent(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	ids := transfertest.AddPackages(t, e.DB, 3, 1000, "complete")
	transfertest.AddPackages(t, e.DB, 1, 1000, "building") // not finalized: never enters

	e.Round(t)
	e.Round(t)
	require.Equal(t, 3, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'raw_data_package'`))
	require.Equal(t, 3, count(t, e, `SELECT count(*) FROM package_states WHERE state = 'WAITING'`))

	require.Equal(t, 3, e.DriveAll(t, "m", transfer.KindRawDataPackage))
	e.Round(t)
	// 3 x 1000 bytes reach the 3000-byte target: one DTP with its operation, once.
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM data_transfer_packages`))
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'data_transfer_package'`))
	for _, id := range ids {
		require.Equal(t, "TRANSFERRING", e.State(t, id))
	}

	require.Equal(t, 1, e.DriveAll(t, "m", transfer.KindDataTransferPackage))
	e.Round(t)
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'transfer'`), "one per archive location")
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM data_transfers`))
	require.Equal(t, 2, e.DriveAll(t, "m", transfer.KindTransfer))
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM data_transfers WHERE status = 'completed' AND retry_count = 1`), "the legacy mirror")
	e.Round(t)
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'unpack'`))
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM data_transfers WHERE unpack_operation_id IS NOT NULL`))
	require.Equal(t, 2, e.DriveAll(t, "m", transfer.KindUnpack))
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM data_transfers WHERE unpack_status = 'completed' AND unpack_retry_count = 1`), "the legacy mirror")
	e.Round(t)
	require.Equal(t, 6, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'long_term_archive'`), "one per (package, archive)")
	require.Equal(t, 6, count(t, e, `SELECT count(*) FROM long_term_archive_transfers`))
	require.Equal(t, "UNPACKED", func() string {
		var s string
		require.NoError(t, e.DB.Get(&s, `SELECT state FROM data_transfer_packages`))
		return s
	}())
	for _, id := range ids {
		require.Equal(t, "WAITING", e.State(t, id), "unpacked, waiting for its archive")
	}
	// ARCHIVED once the replication rule is met (by default a verified copy at every long-term
	// archive location: here cornell-archive and cologne-archive), not by the first copy.
	archive := func(site string) {
		ops, err := e.Store.Claim(ctx, "m", []transfer.Kind{transfer.KindLongTermArchive}, site, 100)
		require.NoError(t, err)
		require.Len(t, ops, 3)
		for _, op := range ops {
			size, sum := transfertest.Report(t, e.DB, op)
			_, err := e.Store.Complete(ctx, op.ID, "m", size, sum, []transfer.Copy{{Location: *op.Destination, Path: fmt.Sprintf("rdp/%d", op.ID)}})
			require.NoError(t, err)
		}
	}
	archive("cornell")
	for _, id := range ids {
		require.Equal(t, "WAITING", e.State(t, id), "one verified archive copy of two")
	}
	archive("cologne")
	for _, id := range ids {
		require.Equal(t, "ARCHIVED", e.State(t, id))
	}
	var err error
	require.Equal(t, 6, count(t, e, `SELECT count(*) FROM physical_copies WHERE verified_at IS NOT NULL AND checksum = $1 AND size_bytes = 1000`, transfertest.PackageChecksum))
	require.Equal(t, 6, count(t, e, `SELECT count(*) FROM long_term_archive_transfers WHERE status = 'completed' AND attempt_count = 1`), "the legacy mirror")
	// Running the planner again creates nothing.
	before := count(t, e, `SELECT count(*) FROM operations`)
	e.Round(t)
	e.Round(t)
	_, err = e.Store.Advance(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, before, count(t, e, `SELECT count(*) FROM operations`))
	_, err = e.DB.Exec(`UPDATE operations SET advanced = false`) // as if a planner crashed before recording it
	require.NoError(t, err)
	_, err = e.Store.Advance(ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, before, count(t, e, `SELECT count(*) FROM operations`))
	require.Equal(t, 6, count(t, e, `SELECT count(*) FROM long_term_archive_transfers`))

	// Staging: archived packages only.
	_, err = e.Store.CreateStaging(ctx, "bob", []uuid.UUID{uuid.New()}, "", "", 0)
	var input *problem.FieldError
	require.ErrorAs(t, err, &input)
	require.Equal(t, "body.raw_data_package_ids[0]", input.Location)
	job, err := e.Store.CreateStaging(ctx, "bob", ids[:2], "", "analysis", 0)
	require.NoError(t, err)
	require.Len(t, job.Operations, 2)
	require.Equal(t, "cologne-processing", job.Destination)
	require.Equal(t, transfer.KindStaging, job.Operations[0].Kind)
}

// DTPs by age: fewer bytes than the target wait until the oldest has waited OPS_DTP_MAX_WAIT.
func TestGroupingByAge(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	transfertest.AddPackages(t, e.DB, 2, 10, "complete")
	e.Round(t)
	e.DriveAll(t, "m", transfer.KindRawDataPackage)
	n, err := e.Store.Group(ctx, transfer.Grouping{TargetBytes: 1 << 40, MaxWait: time.Hour}, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = e.DB.Exec(`UPDATE operations SET completed_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	n, err = e.Store.Group(ctx, transfer.Grouping{TargetBytes: 1 << 40, MaxWait: time.Hour}, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 2, count(t, e, `SELECT package_count FROM data_transfer_packages`))
}

// Retryable failures back off and retry until max_retries, then FAILED; non-retryable fail at
// once; an expired lease is a stalled failure. Each lands in history and the failure trail.
func TestRetriesBackoffMaxRetriesAndStall(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	transfertest.AddPackages(t, e.DB, 2, 1, "complete")
	e.Round(t)
	kinds := []transfer.Kind{transfer.KindRawDataPackage}

	ops, err := e.Store.Claim(ctx, "m", kinds, "", 1)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	id := ops[0].ID
	require.Equal(t, transfer.StatusInProgress, ops[0].Status)
	require.Equal(t, 1, ops[0].Attempt)

	// Another mover cannot report on it.
	_, err = e.Store.Fail(ctx, id, "other", transfer.Failure{ErrorType: "x", Message: "y", Retryable: true})
	var lease *transfer.LeaseConflictError
	require.ErrorAs(t, err, &lease)

	for i := 1; i <= 3; i++ {
		op, err := e.Store.Fail(ctx, id, "m", transfer.Failure{ErrorType: "network", Message: "link down", Retryable: true, LogPath: "/logs/a"})
		require.NoError(t, err)
		require.Equal(t, transfer.StatusPending, op.Status)
		require.Equal(t, i, op.RetryCount)
		wait := transfer.Backoff(e.Config.RetryBackoff, e.Config.RetryBackoffMax, i)
		require.WithinDuration(t, time.Now().Add(wait), op.NextAttemptAt, 150*time.Millisecond+wait/2)
		// Not due yet: a claim does not return it (the other package is claimable).
		got, err := e.Store.Claim(ctx, "m", kinds, "", 10)
		require.NoError(t, err)
		for _, g := range got {
			require.NotEqual(t, id, g.ID, "claimed during its backoff")
			_, err = e.Store.Fail(ctx, g.ID, "m", transfer.Failure{ErrorType: "disk_full", Message: "no space", Retryable: false})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			got, err := e.Store.Claim(ctx, "m", kinds, "", 1)
			require.NoError(t, err)
			return len(got) == 1 && got[0].ID == id
		}, 5*time.Second, 20*time.Millisecond)
	}
	op, err := e.Store.Fail(ctx, id, "m", transfer.Failure{ErrorType: "network", Message: "still down", Retryable: true})
	require.NoError(t, err)
	require.Equal(t, transfer.StatusFailed, op.Status, "max_retries reached")
	require.Equal(t, 3, op.RetryCount)
	require.Equal(t, "still down", *op.LastError)

	// The non-retryable one failed at once, retry_count 0.
	var other transfer.Operation
	require.NoError(t, e.DB.Get(&other.RetryCount, `SELECT retry_count FROM operations WHERE kind = 'raw_data_package' AND id <> $1`, id))
	require.Zero(t, other.RetryCount)
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM operations WHERE status = 'FAILED'`))

	hist, err := e.Store.FailureHistory(ctx, transfer.KindRawDataPackage, id)
	require.NoError(t, err)
	require.Equal(t, transfer.StatusFailed, hist.CurrentStatus)
	require.Equal(t, 4, hist.Failures)
	var events []string
	for _, ev := range hist.Events {
		events = append(events, ev.Event)
	}
	require.Equal(t, []string{"created", "claimed", "retry", "claimed", "retry", "claimed", "retry", "claimed", "failed"}, events)
	require.Equal(t, "/logs/a", *hist.Events[2].LogPath)
	require.Equal(t, "network", *hist.Events[2].ErrorType)

	// Stall: a lease that expires without heartbeat.
	_, err = e.Store.Reset(ctx, transfer.KindRawDataPackage, id, "admin", "", false)
	require.NoError(t, err)
	_, err = e.DB.Exec(`UPDATE operations SET max_retries = 10 WHERE id = $1`, id)
	require.NoError(t, err)
	ops, err = e.Store.Claim(ctx, "m", kinds, "", 1)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	hb, err := e.Store.Heartbeat(ctx, id, "m")
	require.NoError(t, err)
	require.True(t, hb.LeaseExpiresAt.After(time.Now().Add(50*time.Second)))
	n, err := e.Store.ExpireLeases(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n, "lease still valid")
	_, err = e.DB.Exec(`UPDATE operations SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
	e.Round(t) // the planner expires leases
	op, err = e.Store.Operation(ctx, "", id)
	require.NoError(t, err)
	require.Equal(t, transfer.StatusPending, op.Status)
	require.Equal(t, transfer.ErrorTypeStalled, *op.LastErrorType)
	_, err = e.Store.Complete(ctx, id, "m", 1, "", nil)
	var conflict *transfer.StatusConflictError
	require.ErrorAs(t, err, &conflict, "a stalled mover's late report is refused")
	hist, err = e.Store.FailureHistory(ctx, transfer.KindRawDataPackage, id)
	require.NoError(t, err)
	last := hist.Events[len(hist.Events)-1]
	require.Equal(t, "stalled", last.Event)
	require.Equal(t, "planner", last.Actor)
}

// Concurrent movers never lease one operation twice.
func TestConcurrentClaimsNeverDoubleLease(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	transfertest.AddPackages(t, e.DB, 300, 1, "complete")
	e.Round(t)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mover := string(rune('a' + w))
			for {
				ops, err := e.Store.Claim(ctx, mover, allKinds, "", 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ops) == 0 {
					return
				}
				mu.Lock()
				for _, op := range ops {
					if prev, dup := seen[op.ID]; dup {
						t.Errorf("operation %d leased to %s and %s", op.ID, prev, mover)
					}
					seen[op.ID] = mover
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	require.Len(t, seen, 300)
	require.Equal(t, 300, count(t, e, `SELECT count(*) FROM operation_history WHERE event = 'claimed'`))
}

// Frequent rounds look only at packages finalized after the watermark; the full pass also
// finds one replayed late with an old finalized_at.
func TestEnterWatermarkAndFullPass(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	transfertest.AddPackages(t, e.DB, 2, 1, "complete")
	n, err := e.Store.Enter(ctx, 100, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	late := transfertest.AddPackages(t, e.DB, 1, 1, "complete")
	_, err = e.DB.Exec(`UPDATE raw_data_packages SET finalized_at = now() - interval '1 day' WHERE id = $1`, late[0])
	require.NoError(t, err)
	since, err := e.Store.EnterWatermark(ctx, 10*time.Minute)
	require.NoError(t, err)
	require.NotNil(t, since)
	n, err = e.Store.Enter(ctx, 100, since)
	require.NoError(t, err)
	require.Zero(t, n, "older than the watermark")
	n, err = e.Store.Enter(ctx, 100, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the full pass finds it")
	require.Equal(t, "WAITING", e.State(t, late[0]))
}

// Complete refuses, writing nothing, an unknown copy location (naming the copy), another
// holder's lease (naming the holder), an unknown operation and a second completion; then it
// completes with the copies recorded, the history appended and the package state recomputed.
func TestCompleteRefusalsWriteNothing(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	ids, ops := claimedPackages(t, e, 1, 1000)
	id := ops[0].ID
	writes := func() int {
		return count(t, e, `SELECT (SELECT count(*) FROM operation_history WHERE operation_id = $1) + (SELECT count(*) FROM physical_copies)`, id)
	}
	before := writes()

	_, err := e.Store.Complete(ctx, id, "m", 1, "", []transfer.Copy{{Location: "cologne-buffer", Path: "a"}, {Location: "nowhere", Path: "b"}})
	var in *problem.FieldError
	require.ErrorAs(t, err, &in)
	require.Equal(t, "body.physical_copies[1].location", in.Location)
	_, err = e.Store.Complete(ctx, id, "other", 1, "", nil)
	var lease *transfer.LeaseConflictError
	require.ErrorAs(t, err, &lease)
	require.Equal(t, "m", lease.Holder)
	_, err = e.Store.Complete(ctx, id+1000, "m", 1, "", nil)
	require.ErrorIs(t, err, problem.ErrNotFound)
	require.Equal(t, before, writes())
	require.Equal(t, "IN_PROGRESS", opStatus(t, e, id))

	// A copy is recorded with what the mover reported of it; a raw_data_package operation's
	// report is verified against nothing, so the copy is not verified and archives nothing.
	op, err := e.Store.Complete(ctx, id, "m", 7, "sha256:ab", []transfer.Copy{{Location: "cologne-archive", Path: "a"}})
	require.NoError(t, err)
	require.Equal(t, transfer.StatusCompleted, op.Status)
	require.Nil(t, op.LeaseHolder)
	require.Equal(t, int64(7), *op.Bytes)
	require.NotNil(t, op.CompletedAt)
	require.Equal(t, before+2, writes())
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM physical_copies WHERE checksum = 'sha256:ab' AND size_bytes = 7 AND verified_at IS NULL`))
	require.Equal(t, "WAITING", e.State(t, ids[0]), "an unverified copy does not count")

	_, err = e.Store.Complete(ctx, id, "m", 7, "", nil)
	var st *transfer.StatusConflictError
	require.ErrorAs(t, err, &st)
	require.Equal(t, transfer.StatusCompleted, st.Current)
	require.Equal(t, transfer.KindRawDataPackage, st.Kind)
}

// claimedPackages brings n finalized packages of size bytes into the pipeline and leases their
// raw_data_package operations to holder m.
func claimedPackages(t *testing.T, e *transfertest.Env, n int, size int64) ([]uuid.UUID, []transfer.Operation) {
	t.Helper()
	ids := transfertest.AddPackages(t, e.DB, n, size, "complete")
	e.Round(t)
	ops, err := e.Store.Claim(context.Background(), "m", []transfer.Kind{transfer.KindRawDataPackage}, "", n)
	require.NoError(t, err)
	require.Len(t, ops, n)
	return ids, ops
}

func opStatus(t *testing.T, e *transfertest.Env, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, e.DB.Get(&s, `SELECT status FROM operations WHERE id = $1`, id))
	return s
}

// files_registered is exact: a trigger on ingest's raw_data_files counts every row inserted
// (not the ones ON CONFLICT DO NOTHING skipped) and deleted, and TRUNCATE resets it.
func TestFilesRegisteredIsMaintained(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	files := func() int64 {
		t.Helper()
		require.NoError(t, e.Store.FoldCounters(ctx))
		counts, err := e.Store.Counters(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(count(t, e, `SELECT count(*) FROM raw_data_files`)), counts["files_registered"], "the counter equals count(*)")
		return counts["files_registered"]
	}
	insert := func(ids ...uuid.UUID) {
		t.Helper()
		_, err := e.DB.Exec(`INSERT INTO raw_data_files (id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum)
			SELECT id, gen_random_uuid(), (SELECT min(id) FROM instrument_modules), 'f/' || id, 1, 'xxh64:0000000000000000'
			  FROM unnest($1::uuid[]) id
			ON CONFLICT (id) DO NOTHING`, uuidArray(ids))
		require.NoError(t, err)
	}
	require.Zero(t, files())
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	insert(a, b)
	require.Equal(t, int64(2), files())
	insert(b, c) // b is there already: one more
	require.Equal(t, int64(3), files())
	_, err := e.DB.Exec(`DELETE FROM raw_data_files WHERE id = $1`, a)
	require.NoError(t, err)
	_, err = e.DB.Exec(`DELETE FROM raw_data_files WHERE id = $1`, uuid.New()) // nothing
	require.NoError(t, err)
	require.Equal(t, int64(2), files())
	// Concurrent writers: every insert counted once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				insert(uuid.New(), uuid.New())
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(162), files())
	insert(uuid.New()) // a delta not yet folded when the table is truncated
	_, err = e.DB.Exec(`TRUNCATE raw_data_files`)
	require.NoError(t, err)
	require.Zero(t, files())
	insert(uuid.New())
	require.Equal(t, int64(1), files())
}

func uuidArray(ids []uuid.UUID) any {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return pq.Array(s)
}

// Concurrent completes through the Completer run in shared batches, yet each request gets its
// own answer: the mover's operation completed once, a second report or another holder's refused,
// an unknown id not found, a bad copy location named; heartbeats refuse the same way.
func TestCompleterAnswersEachRequest(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	transfertest.AddPackages(t, e.DB, 40, 1, "complete")
	e.Round(t)
	kinds := []transfer.Kind{transfer.KindRawDataPackage}
	ops, err := e.Store.Claim(ctx, "m", kinds, "", 40)
	require.NoError(t, err)
	require.Len(t, ops, 40)

	hb, err := e.Store.Heartbeat(ctx, ops[0].ID, "m")
	require.NoError(t, err)
	require.Equal(t, ops[0].ID, hb.ID)
	require.Equal(t, "m", *hb.LeaseHolder)
	_, err = e.Store.Heartbeat(ctx, ops[0].ID, "other")
	var lease *transfer.LeaseConflictError
	require.ErrorAs(t, err, &lease)
	_, err = e.Store.Heartbeat(ctx, ops[len(ops)-1].ID+1000, "m")
	require.ErrorIs(t, err, problem.ErrNotFound)

	c := &postgres.Completer{Store: e.Store}
	type answer struct {
		req transfer.CompleteRequest
		op  transfer.Operation
		err error
	}
	var reqs []transfer.CompleteRequest
	for i, op := range ops {
		n := int64(i)
		reqs = append(reqs, transfer.CompleteRequest{ID: op.ID, Holder: "m", Bytes: &n, Checksum: "sha256:ab"})
	}
	reqs = append(reqs,
		transfer.CompleteRequest{ID: ops[0].ID, Holder: "m"},         // twice: one of the two is refused
		transfer.CompleteRequest{ID: ops[1].ID, Holder: "other"},     // not the holder
		transfer.CompleteRequest{ID: ops[39].ID + 1000, Holder: "m"}, // unknown
		transfer.CompleteRequest{ID: ops[2].ID, Holder: "m", Copies: []transfer.Copy{{Location: "nowhere", Path: "x"}}},
	)
	answers := make([]answer, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op, err := c.Complete(ctx, r)
			answers[i] = answer{r, op, err}
		}()
	}
	wg.Wait()
	okByID := map[int64]int{}
	var conflicts, leases, notFound, inputs int
	for _, a := range answers {
		var status *transfer.StatusConflictError
		var input *problem.FieldError
		switch {
		case a.err == nil:
			okByID[a.op.ID]++
			require.Equal(t, a.req.ID, a.op.ID)
			require.Equal(t, transfer.StatusCompleted, a.op.Status)
			require.Nil(t, a.op.LeaseHolder)
		case errors.As(a.err, &status):
			conflicts++
		case errors.As(a.err, &lease):
			leases++
		case errors.Is(a.err, problem.ErrNotFound):
			notFound++
		case errors.As(a.err, &input):
			inputs++
			require.Equal(t, "body.physical_copies[0].location", input.Location)
		default:
			t.Fatalf("unexpected error %v", a.err)
		}
	}
	// Every operation completed by exactly one request; the second report of ops[0] is refused
	// as COMPLETED; the other holder's report on ops[1] and the bad copy on ops[2] are refused
	// for their own reason or as COMPLETED, depending on which request ran first.
	require.Len(t, okByID, 40)
	for _, op := range ops {
		require.Equal(t, 1, okByID[op.ID], "operation %d", op.ID)
	}
	require.Equal(t, 1, notFound)
	require.GreaterOrEqual(t, conflicts, 1)
	require.Equal(t, 3, conflicts+leases+inputs)
	require.Equal(t, 40, count(t, e, `SELECT count(*) FROM operations WHERE status = 'COMPLETED'`))
	require.Equal(t, 40, count(t, e, `SELECT count(*) FROM operation_history WHERE event = 'completed'`), "one history entry per operation")
}

// A raw_data_package operation completing without copies cannot change its package's state
// (migration 00012): the complete neither waits for nor writes the package's row, and the state
// stays WAITING; with a copy at a long-term archive location it does both.
func TestCompleteTouchesPackageStatesOnlyWhenTheyCanChange(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	ids, ops := claimedPackages(t, e, 2, 1)
	pkg := map[int64]uuid.UUID{}
	for _, op := range ops {
		pkg[op.ID] = *op.RawDataPackageID
	}
	// Another transaction holds both package rows.
	tx, err := e.DB.Beginx()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT 1 FROM package_states WHERE raw_data_package_id = ANY($1::uuid[]) FOR UPDATE`, uuidArray(ids))
	require.NoError(t, err)

	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	op, err := e.Completer.Complete(quick, transfer.CompleteRequest{ID: ops[0].ID, Holder: "m"})
	require.NoError(t, err, "not held up by the package row")
	require.Equal(t, transfer.StatusCompleted, op.Status)

	done := make(chan error, 1)
	go func() {
		_, err := e.Store.Complete(ctx, ops[1].ID, "m", 1, "", []transfer.Copy{{Location: "cologne-archive", Path: "p"}})
		done <- err
	}()
	// It waits for the package row: polled until its backend shows up waiting on a lock, and it
	// must not end before.
	deadline := time.Now().Add(10 * time.Second)
	for count(t, e, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		select {
		case err := <-done:
			t.Fatalf("a complete that archives its package did not wait for the package row: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the complete neither ended nor waited on a lock")
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a complete that archives its package did not wait for the package row: %v", err)
	default:
	}
	require.NoError(t, tx.Rollback())
	require.NoError(t, <-done)
	require.Equal(t, "WAITING", e.State(t, pkg[ops[0].ID]))
	require.Equal(t, "WAITING", e.State(t, pkg[ops[1].ID]), "derived again (an unverified copy counts for nothing)")
}

// A DTP made by Group (transfer_make_dtp, migration 00013): its members, their DTP and derived
// state written once, their operations marked grouped, its operation with its history entry,
// and the overview counters equal to the rows.
func TestGroupMakesTheDTPInOneCall(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	ids := transfertest.AddPackages(t, e.DB, 5, 1000, "complete")
	e.Round(t)
	e.DriveAll(t, "m", transfer.KindRawDataPackage) // its rounds group the first three (3,000 bytes)
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM data_transfer_packages WHERE package_count = 3 AND size_bytes = 3000`))
	require.Equal(t, 3, count(t, e, `SELECT count(*) FROM data_transfer_package_members`))
	require.Equal(t, 3, count(t, e, `SELECT count(*) FROM package_states p JOIN data_transfer_package_members m USING (raw_data_package_id)
		WHERE p.data_transfer_package_id = m.data_transfer_package_id AND p.state = 'TRANSFERRING' AND p.state_changed_at >= p.created_at`))
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM package_states WHERE data_transfer_package_id IS NULL AND state = 'WAITING'`))
	require.Equal(t, 3, count(t, e, `SELECT count(*) FROM operations o JOIN data_transfer_package_members m USING (raw_data_package_id)
		WHERE o.kind = 'raw_data_package' AND o.advanced`))
	require.Equal(t, 2, count(t, e, `SELECT count(*) FROM operations WHERE kind = 'raw_data_package' AND NOT advanced`))
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM operations o JOIN operation_history h ON h.operation_id = o.id
		WHERE o.kind = 'data_transfer_package' AND o.status = 'PENDING' AND h.event = 'created' AND h.actor = 'planner'`))

	require.NoError(t, e.Store.FoldCounters(ctx))
	counts, err := e.Store.Counters(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), counts["pkg:TRANSFERRING"])
	require.Equal(t, int64(2), counts["pkg:WAITING"])
	require.Equal(t, int64(1), counts["dtp:BUILDING"])
	require.Equal(t, int64(1), counts["op:data_transfer_package:PENDING"])

	// Grouping a package that is in a DTP already writes nothing.
	var member uuid.UUID
	require.NoError(t, e.DB.Get(&member, `SELECT raw_data_package_id FROM data_transfer_package_members LIMIT 1`))
	_, err = e.DB.Exec(`SELECT transfer_make_dtp($1::uuid[], '{}', 2, 2, 1, 3)`, uuidArray([]uuid.UUID{member, ids[4]}))
	require.ErrorContains(t, err, "transfer_make_dtp_raced")
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM data_transfer_packages`))
}
