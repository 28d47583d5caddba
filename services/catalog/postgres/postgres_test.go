package postgres

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/catalog"
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
