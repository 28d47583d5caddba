package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/transfer"
)

// A round whose shared statement fails serves its claims one by one: a bad claim fails alone.
// A claim whose caller has gone before its round starts gets nothing leased.
func TestClaimRoundFailureAndGoneCallers(t *testing.T) {
	db, err := database.Open(testenv.Database(t), 4)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Exec(`
		WITH p AS (
			INSERT INTO package_states (raw_data_package_id, state, size_bytes)
			SELECT gen_random_uuid(), 'WAITING', 1 FROM generate_series(1, 10) RETURNING raw_data_package_id)
		INSERT INTO operations (kind, raw_data_package_id, site_id, source_location_id, destination_location_id)
		SELECT 'raw_data_package', raw_data_package_id, 1, 1, 2 FROM p`)
	require.NoError(t, err)
	c := &Claimer{Store: &Store{DB: db, Lease: time.Minute}}
	kinds := []transfer.Kind{transfer.KindRawDataPackage}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	claim := func(ctx context.Context, holder string) *pendingClaim {
		return &pendingClaim{ctx: ctx, req: transfer.ClaimRequest{Holder: holder, Kinds: kinds, Max: 3}}
	}
	good, bad, left, late := claim(context.Background(), "a"), claim(context.Background(), "b\x00"), claim(gone, "c"), claim(context.Background(), "d")
	require.NoError(t, c.run(&claimRound{claims: []*pendingClaim{good, bad, left, late}}))

	require.NoError(t, good.err)
	require.Len(t, good.ops, 3)
	require.Error(t, bad.err, "PostgreSQL refuses a NUL in text")
	require.ErrorIs(t, left.err, context.Canceled)
	require.Empty(t, left.ops)
	require.NoError(t, late.err)
	require.Len(t, late.ops, 3)
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM operations WHERE status = 'IN_PROGRESS'`))
	require.Equal(t, 6, n, "nothing leased to the failed or the gone claim")
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM operation_history WHERE event = 'claimed'`))
	require.Equal(t, 6, n)
}
