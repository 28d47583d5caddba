package transfer_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPAPIDoesNotImportPostgres: the handlers decode, call a use case of transfer.Service and
// encode; what they use is declared in the root package, so httpapi never reaches the store (nor
// through live or planner).
func TestHTTPAPIDoesNotImportPostgres(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./httpapi").Output()
	require.NoError(t, err)
	deps := string(out)
	require.Contains(t, deps, "github.com/obsops/obsops/services/transfer/httpapi", "the listing is httpapi's")
	require.NotContains(t, deps, "github.com/obsops/obsops/services/transfer/postgres")
}
