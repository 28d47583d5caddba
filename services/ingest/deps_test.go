package ingest_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPLayerUsesOnlyTheDomain: the HTTP layer decodes, calls ingest.Service and encodes; it
// reaches the database and Redis only through the service's interfaces, so it links neither
// services/ingest/postgres nor services/ingest/buffer (app wires them in).
func TestHTTPLayerUsesOnlyTheDomain(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./httpapi").Output()
	require.NoError(t, err)
	deps := string(out)
	require.Contains(t, deps, "github.com/obsops/obsops/services/ingest/httpapi", "the listing is httpapi's")
	for _, f := range []string{"github.com/obsops/obsops/services/ingest/postgres", "github.com/obsops/obsops/services/ingest/buffer"} {
		require.NotContains(t, deps, f)
	}
}

// TestDomainImportsNoAdapter: the root package declares the interfaces it needs (Store,
// Buffer, Direct); postgres and buffer implement them, never the other way round.
func TestDomainImportsNoAdapter(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	require.NotContains(t, string(out), "github.com/obsops/obsops/services/ingest/")
}
