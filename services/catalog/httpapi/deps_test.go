package httpapi_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPAPIHasNoStorage: the HTTP layer decodes, calls catalog.Service and encodes; storage is
// behind the interfaces the catalog package declares, so httpapi never links the postgres package.
func TestHTTPAPIHasNoStorage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	deps := string(out)
	require.Contains(t, deps, "github.com/obsops/obsops/services/catalog\n", "the listing is httpapi's")
	require.NotContains(t, deps, "github.com/obsops/obsops/services/catalog/postgres")
}
