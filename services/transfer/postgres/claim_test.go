package postgres_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// seedOps inserts n PENDING operations of kind at site (ids of sites and locations as seeded by
// migration 00008), each on a package of its own.
func seedOps(t *testing.T, e *transfertest.Env, kind transfer.Kind, site, n int) {
	t.Helper()
	_, err := e.DB.Exec(`
		WITH p AS (
			INSERT INTO package_states (raw_data_package_id, state, size_bytes)
			SELECT gen_random_uuid(), 'WAITING', 1 FROM generate_series(1, $3) RETURNING raw_data_package_id)
		INSERT INTO operations (kind, raw_data_package_id, site_id, source_location_id, destination_location_id)
		SELECT $1, raw_data_package_id, $2, 3, 3 FROM p`, string(kind), site, n)
	require.NoError(t, err)
}

// Claims through the Claimer, many at once: never one operation to two claims, never more than a
// claim's max, each operation leased to its own claim's holder with its own history entry.
func TestClaimerNeverDoubleLeases(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	seedOps(t, e, transfer.KindRawDataPackage, 1, 500)
	kinds := []transfer.Kind{transfer.KindRawDataPackage}
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := "mover/" + strconv.Itoa(w)
			max := 3 + w // claims of different sizes share rounds
			for {
				ops, err := e.Claimer.Claim(ctx, transfer.ClaimRequest{Holder: holder, Kinds: kinds, Max: max})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ops) == 0 {
					return
				}
				if len(ops) > max {
					t.Errorf("%s asked for %d, got %d", holder, max, len(ops))
				}
				mu.Lock()
				for i, op := range ops {
					if prev, dup := seen[op.ID]; dup {
						t.Errorf("operation %d leased to %s and %s", op.ID, prev, holder)
					}
					seen[op.ID] = holder
					if op.LeaseHolder == nil || *op.LeaseHolder != holder || op.Status != transfer.StatusInProgress {
						t.Errorf("operation %d answered to %s as %s leased to %v", op.ID, holder, op.Status, op.LeaseHolder)
					}
					if i > 0 && ops[i-1].ID >= op.ID {
						t.Errorf("answer to %s not sorted by id", holder)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 500)
	var rows []struct {
		ID     int64  `db:"id"`
		Holder string `db:"lease_holder"`
		Actor  string `db:"actor"`
	}
	require.NoError(t, e.DB.Select(&rows, `SELECT o.id, o.lease_holder, h.actor FROM operations o
		JOIN operation_history h ON h.operation_id = o.id AND h.event = 'claimed'`))
	require.Len(t, rows, 500, "one claimed entry per operation")
	for _, r := range rows {
		require.Equal(t, seen[r.ID], r.Holder)
		require.Equal(t, seen[r.ID], r.Actor)
	}
}

// Concurrent claims of several kinds take the first kind first, all of them together (whatever
// rounds they share); the site filter holds, and an unknown site is an input error for each.
func TestClaimerKindsOrderAndSite(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	seedOps(t, e, transfer.KindRawDataPackage, 1, 5)  // at fyst
	seedOps(t, e, transfer.KindLongTermArchive, 2, 5) // at cologne
	kinds := []transfer.Kind{transfer.KindRawDataPackage, transfer.KindLongTermArchive}
	claimAll := func(site string, n, max int) ([][]transfer.Operation, []error) {
		res, errs := make([][]transfer.Operation, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = e.Claimer.Claim(ctx, transfer.ClaimRequest{Holder: "m" + strconv.Itoa(i), Kinds: kinds, Site: site, Max: max})
			}()
		}
		wg.Wait()
		return res, errs
	}

	res, errs := claimAll("nowhere", 3, 2)
	for i := range res {
		var input *problem.FieldError
		require.ErrorAs(t, errs[i], &input)
		require.Equal(t, "body.site", input.Location)
	}

	// 4 claims of 2 = 8 of the 10: the five raw_data_package operations and three others.
	res, errs = claimAll("", 4, 2)
	got := map[transfer.Kind]int{}
	for i := range res {
		require.NoError(t, errs[i])
		require.LessOrEqual(t, len(res[i]), 2)
		for _, op := range res[i] {
			got[op.Kind]++
		}
	}
	require.Equal(t, map[transfer.Kind]int{transfer.KindRawDataPackage: 5, transfer.KindLongTermArchive: 3}, got)

	// The two left are at cologne: none for fyst, both for cologne.
	res, errs = claimAll("fyst", 2, 5)
	for i := range res {
		require.NoError(t, errs[i])
		require.Empty(t, res[i])
	}
	res, errs = claimAll("cologne", 2, 5)
	n := 0
	for i := range res {
		require.NoError(t, errs[i])
		for _, op := range res[i] {
			require.Equal(t, "cologne", op.Site)
			n++
		}
	}
	require.Equal(t, 2, n)
}

// A Claimer starts its claims where its last one ended (past the claimed operations' dead index
// entries) and from the head at least once a second: an operation that became due before the
// last one leased but was committed after it is leased within about a second.
func TestClaimerLeasesWhatWasCommittedLate(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	seedOps(t, e, transfer.KindRawDataPackage, 1, 200)
	kinds := []transfer.Kind{transfer.KindRawDataPackage}
	claim := func() []transfer.Operation {
		ops, err := e.Claimer.Claim(ctx, transfer.ClaimRequest{Holder: "m", Kinds: kinds, Max: 5})
		require.NoError(t, err)
		return ops
	}
	require.Len(t, claim(), 5)
	// Due long ago, committed now.
	seedOps(t, e, transfer.KindRawDataPackage, 1, 1)
	var late int64
	require.NoError(t, e.DB.Get(&late, `UPDATE operations SET next_attempt_at = now() - interval '1 day'
		WHERE id = (SELECT max(id) FROM operations) RETURNING id`))
	deadline := time.Now().Add(3 * time.Second)
	for {
		ops := claim()
		require.NotEmpty(t, ops)
		if slices.ContainsFunc(ops, func(op transfer.Operation) bool { return op.ID == late }) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the late operation was not leased within 3 s")
		time.Sleep(100 * time.Millisecond)
	}
}
