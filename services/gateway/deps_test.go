package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGatewayLinksNoDatabase: the gateway has no database, so its binary links no SQL driver,
// no sqlx, no migrations and not pkg/database (the chassis gives each binary only what it uses).
// Checked on the package graph, and on the built binary when OPS_BIN_DIR has one.
func TestGatewayLinksNoDatabase(t *testing.T) {
	forbidden := []string{"github.com/lib/pq", "github.com/jmoiron/sqlx", "github.com/pressly/goose",
		"github.com/obsops/obsops/pkg/database", "github.com/obsops/obsops/migrations"}
	out, err := exec.Command("go", "list", "-deps", "./cmd/gateway").Output()
	require.NoError(t, err)
	deps := string(out)
	require.Contains(t, deps, "github.com/obsops/obsops/pkg/service", "the listing is the gateway's")
	for _, f := range forbidden {
		require.NotContains(t, deps, f)
	}
	if dir := os.Getenv("OPS_BIN_DIR"); dir != "" {
		bin := filepath.Join(dir, "gateway")
		if _, err := os.Stat(bin); err == nil {
			out, err := exec.Command("go", "version", "-m", bin).Output()
			require.NoError(t, err)
			for _, f := range forbidden {
				require.False(t, strings.Contains(string(out), f), "%s linked into %s", f, bin)
			}
		}
	}
}
