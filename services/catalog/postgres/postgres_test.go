package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
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
