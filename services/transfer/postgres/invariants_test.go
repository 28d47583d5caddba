package postgres_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// violation is one row of an invariant check (migrations/invariants/*.sql).
type violation struct {
	ID     string `db:"id"`
	Detail string `db:"detail"`
}

// invariant runs the check migrations/invariants/<name>.sql on e's database.
func invariant(t *testing.T, e *transfertest.Env, name string) []violation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "migrations", "invariants", name+".sql"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "-- "), "first line: -- <description>")
	out := []violation{}
	require.NoError(t, e.DB.Select(&out, string(b)))
	return out
}

// The transfer invariants (issue 23) find nothing in a database the service wrote, and each
// finds the contradiction it is about once one is written by hand.
func TestTransferInvariants(t *testing.T) {
	e := transfertest.New(t)
	ids := transfertest.AddPackages(t, e.DB, 3, 1000, "complete")
	e.Round(t)
	e.DriveAll(t, "m", transfer.Kinds()...)
	for _, id := range ids {
		require.Equal(t, "ARCHIVED", e.State(t, id))
	}
	names := []string{"transfer_archived_without_verified_copies", "transfer_failed_chain_not_failed", "transfer_completed_checksum_mismatch"}
	for _, n := range names {
		require.Empty(t, invariant(t, e, n), n)
	}

	// A copy that lost its verification: ARCHIVED without the rule met.
	_, err := e.DB.Exec(`UPDATE physical_copies SET verified_at = NULL WHERE raw_data_package_id = $1 AND location_id = 3`, ids[0])
	require.NoError(t, err)
	v := invariant(t, e, "transfer_archived_without_verified_copies")
	require.Len(t, v, 1)
	require.Equal(t, ids[0].String(), v[0].ID)
	require.Contains(t, v[0].Detail, "cornell-archive")

	// A transfer FAILED behind the service's back: every package of its DTP is shown ARCHIVED.
	_, err = e.DB.Exec(`UPDATE operations SET status = 'FAILED' WHERE id = (SELECT min(id) FROM operations WHERE kind = 'transfer')`)
	require.NoError(t, err)
	v = invariant(t, e, "transfer_failed_chain_not_failed")
	require.Len(t, v, 3)
	require.Contains(t, v[0].Detail, "transfer operation")

	// An archive operation completed with another checksum, a verified copy of another size.
	_, err = e.DB.Exec(`UPDATE operations SET checksum = $1 WHERE id = (SELECT min(id) FROM operations WHERE kind = 'long_term_archive')`, transfertest.WrongChecksum)
	require.NoError(t, err)
	_, err = e.DB.Exec(`UPDATE physical_copies SET size_bytes = 999 WHERE id = (SELECT max(id) FROM physical_copies WHERE verified_at IS NOT NULL)`)
	require.NoError(t, err)
	v = invariant(t, e, "transfer_completed_checksum_mismatch")
	require.Len(t, v, 2)
	require.True(t, strings.HasPrefix(v[0].ID, "long_term_archive/"), v[0].ID)
	require.Contains(t, v[0].Detail, transfertest.WrongChecksum)
	require.True(t, strings.HasPrefix(v[1].ID, "physical_copy/"), v[1].ID)
}
