package planner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// opOf returns the id of the first operation of kind matching where (with arg).
func opOf(t *testing.T, e *transfertest.Env, kind transfer.Kind, where string, arg any) int64 {
	t.Helper()
	var id int64
	require.NoError(t, e.DB.Get(&id, `SELECT id FROM operations WHERE kind = $1 AND `+where+` ORDER BY id LIMIT 1`, string(kind), arg))
	return id
}

// finish leases operation id to "m" (whatever else is due) and completes or fails it.
func finish(t *testing.T, e *transfertest.Env, id int64, ok bool) {
	t.Helper()
	ctx := context.Background()
	_, err := e.DB.Exec(`UPDATE operations SET status = 'IN_PROGRESS', lease_holder = 'm', lease_expires_at = now() + interval '1 minute' WHERE id = $1`, id)
	require.NoError(t, err)
	if ok {
		op, err := e.Store.Operation(ctx, "", id)
		require.NoError(t, err)
		size, sum := transfertest.Report(t, e.DB, op)
		var copies []transfer.Copy
		if op.Kind == transfer.KindLongTermArchive {
			copies = []transfer.Copy{{Location: *op.Destination, Path: fmt.Sprintf("archive/%d", id)}}
		}
		_, err = e.Store.Complete(ctx, id, "m", size, sum, copies)
		require.NoError(t, err)
		return
	} else {
		_, err = e.Store.Fail(ctx, id, "m", transfer.Failure{ErrorType: "broken", Message: "no", Retryable: false})
	}
	require.NoError(t, err)
}

// reconcileCase corrupts the stored state of pkg, checks that the sweep finds it, and that
// reconcile restores want and reports the change.
func reconcileCase(t *testing.T, e *transfertest.Env, pkg uuid.UUID, want string) {
	t.Helper()
	ctx := context.Background()
	require.Equal(t, want, e.State(t, pkg), "maintained state")
	wrong := "WAITING"
	if want == "WAITING" {
		wrong = "ARCHIVED"
	}
	_, err := e.DB.Exec(`UPDATE package_states SET state = $2 WHERE raw_data_package_id = $1`, pkg, wrong)
	require.NoError(t, err)
	n, err := e.Reconciler.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	members, err := e.Reconciler.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{pkg.String()}, members)
	changes, err := e.Reconciler.ReconcileOne(ctx, pkg)
	require.NoError(t, err)
	require.Equal(t, []transfer.StateChange{{PackageID: pkg, From: transfer.PackageState(wrong), To: transfer.PackageState(want)}}, changes)
	require.Equal(t, want, e.State(t, pkg))
	members, err = e.Reconciler.Members(ctx)
	require.NoError(t, err)
	require.Empty(t, members, "reconcile removes the package from the set")
	changes, err = e.Reconciler.ReconcileOne(ctx, pkg)
	require.NoError(t, err)
	require.Empty(t, changes, "nothing left to change")
}

// Every derivation rule of the package lifecycle state, and reconcile of each.
func TestDerivationRulesAndReconcile(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	pkgs := transfertest.AddPackages(t, e.DB, 3, 1000, "complete")
	e.Round(t)

	t.Run("WAITING: in no DTP yet", func(t *testing.T) { reconcileCase(t, e, pkgs[0], "WAITING") })

	t.Run("FAILED: its raw_data_package operation failed", func(t *testing.T) {
		id := opOf(t, e, transfer.KindRawDataPackage, "raw_data_package_id = $2", pkgs[0])
		finish(t, e, id, false)
		reconcileCase(t, e, pkgs[0], "FAILED")
		_, err := e.Store.Reset(ctx, transfer.KindRawDataPackage, id, "admin", "", false)
		require.NoError(t, err)
		require.Equal(t, "WAITING", e.State(t, pkgs[0]), "a reset recomputes the state")
	})

	e.DriveAll(t, "m", transfer.KindRawDataPackage)
	var dtp int64
	require.NoError(t, e.DB.Get(&dtp, `SELECT id FROM data_transfer_packages`))

	t.Run("TRANSFERRING: its DTP's operations are not all done", func(t *testing.T) { reconcileCase(t, e, pkgs[1], "TRANSFERRING") })

	e.DriveAll(t, "m", transfer.KindDataTransferPackage)
	t.Run("TRANSFERRING: DTP built, transfers pending", func(t *testing.T) { reconcileCase(t, e, pkgs[1], "TRANSFERRING") })

	t.Run("FAILED: a transfer of its DTP failed (every member)", func(t *testing.T) {
		id := opOf(t, e, transfer.KindTransfer, "data_transfer_package_id = $2", dtp)
		finish(t, e, id, false)
		for _, p := range pkgs {
			require.Equal(t, "FAILED", e.State(t, p))
		}
		reconcileCase(t, e, pkgs[2], "FAILED")
		_, err := e.Store.Reset(ctx, transfer.KindTransfer, id, "admin", "", false)
		require.NoError(t, err)
		require.Equal(t, "TRANSFERRING", e.State(t, pkgs[2]))
	})

	e.DriveAll(t, "m", transfer.KindTransfer, transfer.KindUnpack)
	t.Run("WAITING: DTP unpacked, archive pending", func(t *testing.T) { reconcileCase(t, e, pkgs[0], "WAITING") })

	var failedArchive int64
	t.Run("FAILED: an archive operation failed", func(t *testing.T) {
		failedArchive = opOf(t, e, transfer.KindLongTermArchive, "raw_data_package_id = $2", pkgs[0])
		finish(t, e, failedArchive, false)
		reconcileCase(t, e, pkgs[0], "FAILED")
	})

	t.Run("FAILED beats a verified copy; ARCHIVED once every archive location holds one", func(t *testing.T) {
		var id int64
		require.NoError(t, e.DB.Get(&id, `SELECT id FROM operations WHERE kind = 'long_term_archive' AND raw_data_package_id = $1 AND status = 'PENDING'`, pkgs[0]))
		finish(t, e, id, true)
		reconcileCase(t, e, pkgs[0], "FAILED")
		_, err := e.Store.Reset(ctx, transfer.KindLongTermArchive, failedArchive, "admin", "", false)
		require.NoError(t, err)
		require.Equal(t, "WAITING", e.State(t, pkgs[0]), "reset: one verified copy of two")
		finish(t, e, failedArchive, true)
		reconcileCase(t, e, pkgs[0], "ARCHIVED")
	})

	t.Run("ARCHIVED: verified copies at every archive location", func(t *testing.T) {
		require.Equal(t, "WAITING", e.State(t, pkgs[1]))
		copyAt := func(loc int, verified bool) {
			_, err := e.DB.Exec(`INSERT INTO physical_copies (raw_data_package_id, location_id, path, checksum, size_bytes, verified_at)
				VALUES ($1::uuid, $2::integer, $5::text, $4, 1000, CASE WHEN $3::boolean THEN now() END)`, pkgs[1], loc, verified, transfertest.PackageChecksum,
				fmt.Sprintf("restored/%s/%d/%v", pkgs[1], loc, verified))
			require.NoError(t, err)
		}
		copyAt(4, true)
		copyAt(3, false)
		n, err := e.Reconciler.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "one verified copy of two, and an unverified one: still WAITING")
		copyAt(3, true)
		require.Equal(t, "WAITING", e.State(t, pkgs[1]), "a copy registered by hand is not seen until reconciled")
		n, err = e.Reconciler.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		changes, err := e.Reconciler.ReconcileInconsistent(ctx)
		require.NoError(t, err)
		require.Equal(t, []transfer.StateChange{{PackageID: pkgs[1], From: "WAITING", To: "ARCHIVED"}}, changes)
	})

	t.Run("unknown package", func(t *testing.T) {
		_, err := e.Reconciler.ReconcileOne(ctx, uuid.New())
		require.ErrorIs(t, err, problem.ErrNotFound)
	})
}

// The set drains in one reconcile-inconsistent, and a lost set is rebuilt by the sweep.
func TestInconsistentSetDrainsAndSweepRebuilds(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	pkgs := transfertest.AddPackages(t, e.DB, 2500, 1, "complete")
	for i := 0; i < 6; i++ {
		e.Round(t)
	}
	require.NoError(t, e.Reconciler.Mark(ctx, pkgs[0])) // marked but consistent: recomputed, unchanged
	_, err := e.DB.Exec(`UPDATE package_states SET state = 'FAILED' WHERE raw_data_package_id IN (SELECT raw_data_package_id FROM package_states ORDER BY raw_data_package_id LIMIT 1200)`)
	require.NoError(t, err)
	n, err := e.Reconciler.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1200, n)
	require.NoError(t, e.RDB.Del(ctx, "ops:transfer:inconsistent").Err()) // the set is lost
	n, err = e.Reconciler.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1200, n, "the sweep rebuilds it from the database")
	changes, err := e.Reconciler.ReconcileInconsistent(ctx)
	require.NoError(t, err)
	require.Len(t, changes, 1200)
	for _, c := range changes {
		require.Equal(t, transfer.PackageState("FAILED"), c.From)
		require.Equal(t, transfer.PackageState("WAITING"), c.To)
	}
	left, err := e.RDB.SCard(ctx, "ops:transfer:inconsistent").Result()
	require.NoError(t, err)
	require.Zero(t, left, "drained")
	n, err = e.Reconciler.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The replication rule is configurable (OPS_ARCHIVE_MIN_COPIES, OPS_ARCHIVE_SITES, stored by
// Store.SetReplication): a changed rule derives every package's state again, and the sweep and
// reconcile apply the stored rule.
func TestReplicationRuleConfigured(t *testing.T) {
	e := transfertest.New(t)
	ctx := context.Background()
	pkgs := transfertest.AddPackages(t, e.DB, 1, 1000, "complete")
	e.Round(t)
	copyAt := func(loc int) {
		_, err := e.DB.Exec(`INSERT INTO physical_copies (raw_data_package_id, location_id, path, checksum, size_bytes, verified_at)
			VALUES ($1::uuid, $2::integer, $3::text, $4, 1000, now())`, pkgs[0], loc, fmt.Sprintf("copy/%d", loc), transfertest.PackageChecksum)
		require.NoError(t, err)
		_, err = e.Store.Reconcile(ctx, pkgs)
		require.NoError(t, err)
	}
	copyAt(4) // cornell-archive
	require.Equal(t, "WAITING", e.State(t, pkgs[0]), "default: a verified copy at every active long-term archive location")

	n, err := e.Store.SetReplication(ctx, transfer.Replication{MinCopies: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n, "a changed rule derives the states again")
	require.Equal(t, "ARCHIVED", e.State(t, pkgs[0]))
	n, err = e.Store.SetReplication(ctx, transfer.Replication{MinCopies: 1})
	require.NoError(t, err)
	require.Zero(t, n, "the same rule again changes nothing")

	_, err = e.Store.SetReplication(ctx, transfer.Replication{MinCopies: 1, Sites: []string{"cologne"}})
	require.NoError(t, err)
	require.Equal(t, "WAITING", e.State(t, pkgs[0]), "a copy at cologne is required")
	copyAt(3) // cologne-archive
	require.Equal(t, "ARCHIVED", e.State(t, pkgs[0]))

	_, err = e.Store.SetReplication(ctx, transfer.Replication{MinCopies: 3})
	require.NoError(t, err)
	require.Equal(t, "WAITING", e.State(t, pkgs[0]), "two copies of three")
	n, err = e.Reconciler.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the sweep applies the same rule")

	_, err = e.Store.SetReplication(ctx, transfer.Replication{Sites: []string{"mars"}})
	var fe *problem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "OPS_ARCHIVE_SITES", fe.Location)

	_, err = e.Store.SetReplication(ctx, transfer.Replication{})
	require.NoError(t, err)
	require.Equal(t, "ARCHIVED", e.State(t, pkgs[0]), "default again: both archive locations hold one")
	_, err = e.DB.Exec(`UPDATE data_locations SET active = false WHERE id = 3`)
	require.NoError(t, err)
	_, err = e.DB.Exec(`DELETE FROM physical_copies WHERE location_id = 3`)
	require.NoError(t, err)
	_, err = e.Store.Reconcile(ctx, pkgs)
	require.NoError(t, err)
	require.Equal(t, "ARCHIVED", e.State(t, pkgs[0]), "an inactive location is not required")
}
