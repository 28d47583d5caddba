package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/visibility/precalc"
)

func TestConeDSN(t *testing.T) {
	got, err := ConeDSN("postgres://u:p@db:5432/ops?sslmode=disable")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@db:5432/ops?jit=off&plan_cache_mode=force_generic_plan&sslmode=disable", got)
	got, err = ConeDSN("host=db dbname=ops sslmode=disable")
	require.NoError(t, err)
	require.Equal(t, "host=db dbname=ops sslmode=disable plan_cache_mode=force_generic_plan jit=off", got)
	_, err = ConeDSN("postgres://u:p@db:bad/ops")
	require.Error(t, err)
}

// A failed first prepare (database unreachable) is not kept: the next cone search prepares again.
func TestConeStatementRetriedAfterFailure(t *testing.T) {
	down, err := sqlx.Open("postgres", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	defer down.Close()
	s := &Store{Cone: down}
	ra, dec, r := 10.0, 20.0, 1.0
	q := catalog.SourceQuery{RADeg: &ra, DecDeg: &dec, Radius: &r, Limit: 10}
	_, err = s.ListSources(context.Background(), q)
	require.Error(t, err)

	dsn, err := ConeDSN(testenv.Database(t))
	require.NoError(t, err)
	up, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	defer up.Close()
	s.Cone, s.DB = up, up
	page, err := s.ListSources(context.Background(), q)
	require.NoError(t, err)
	require.Equal(t, 0, page.Total)
	require.Empty(t, page.Items)
}

// TestPrecalcJobsAreBounded: with maxOpen jobs queued or running a new job is refused
// (precalc.ErrTooManyJobs) while the same request still answers its open job; once a job has
// finished there is room again.
func TestPrecalcJobsAreBounded(t *testing.T) {
	db, err := sqlx.Open("postgres", testenv.Database(t))
	require.NoError(t, err)
	defer db.Close()
	s := &Store{DB: db}
	ctx := context.Background()
	a, created, err := s.CreatePrecalcJob(ctx, strings.Repeat("a", 64), 2026, []int64{1}, "ada", 1)
	require.NoError(t, err)
	require.True(t, created)
	_, _, err = s.CreatePrecalcJob(ctx, strings.Repeat("b", 64), 2026, []int64{2}, "ada", 1)
	require.ErrorIs(t, err, precalc.ErrTooManyJobs)
	again, created, err := s.CreatePrecalcJob(ctx, strings.Repeat("a", 64), 2026, []int64{1}, "ada", 1)
	require.NoError(t, err)
	require.False(t, created, "the same request answers its open job")
	require.Equal(t, a.ID, again.ID)
	require.NoError(t, s.UpdatePrecalcJob(ctx, a.ID, precalc.JobCompleted, 1, nil))
	_, created, err = s.CreatePrecalcJob(ctx, strings.Repeat("b", 64), 2026, []int64{2}, "ada", 1)
	require.NoError(t, err)
	require.True(t, created, "room again once the open job finished")
}
