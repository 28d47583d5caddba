package transfer_test

import (
	"testing"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestHTTPAPIDoesNotImportPostgres: the handlers decode, call a use case of transfer.Service and
// encode; what they use is declared in the root package, so httpapi never reaches the store (nor
// through live or planner).
func TestHTTPAPIDoesNotImportPostgres(t *testing.T) {
	testenv.RequireNoDeps(t, "./httpapi", "github.com/obsops/obsops/services/transfer/postgres")
}

// TestDomainImportsNoAdapter: the root package declares the interfaces its use cases need;
// postgres, live and planner implement or drive them, never the other way round.
func TestDomainImportsNoAdapter(t *testing.T) {
	testenv.RequireNoDeps(t, ".", "github.com/obsops/obsops/services/transfer/")
}
