package testenv_test

import (
	"context"
	"database/sql"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestSuiteServicesConnectAsThemselves: the suite's binaries reach PostgreSQL as their own roles
// (obsops_<service>, never the administrator of the tests' cluster) and Redis as their own ACL
// users, so a missing grant or ACL rule fails the tests that need it.
func TestSuiteServicesConnectAsThemselves(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()
	u, err := url.Parse(s.DatabaseURL)
	require.NoError(t, err)
	var roles []string
	rows, err := db.Query(`SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() ORDER BY 1`, strings.TrimPrefix(u.Path, "/"))
	require.NoError(t, err)
	for rows.Next() {
		var r string
		require.NoError(t, rows.Scan(&r))
		roles = append(roles, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"obsops_authtoken", "obsops_catalog", "obsops_ingest", "obsops_site", "obsops_transfer"}, roles)

	list, err := s.Redis.Client().ClientList(context.Background()).Result()
	require.NoError(t, err)
	users := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		for _, f := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(f, "user="); ok {
				users[name]++
			}
		}
	}
	require.Equal(t, 1, users["default"], "only this test's own connection uses the default user: %s", list)
	delete(users, "default")
	delete(users, "gateway") // connects on its first rate-limited request
	var got []string
	for name := range users {
		got = append(got, name)
	}
	sort.Strings(got)
	require.Equal(t, []string{"authtoken", "catalog", "ingest", "site", "transfer"}, got)
}
