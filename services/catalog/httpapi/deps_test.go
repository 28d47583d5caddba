package httpapi_test

import (
	"testing"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestHTTPAPIHasNoStorage: the HTTP layer decodes, calls catalog.Service and encodes; storage is
// behind the interfaces the catalog package declares, so httpapi never links the postgres package.
func TestHTTPAPIHasNoStorage(t *testing.T) {
	testenv.RequireNoDeps(t, ".", "github.com/obsops/obsops/services/catalog/postgres")
}

// TestDomainHasNoStorage: the catalog package declares the Store its use cases need; postgres
// implements it, never the other way round (the pure engines visibility and resolve it may use).
func TestDomainHasNoStorage(t *testing.T) {
	testenv.RequireNoDeps(t, "github.com/obsops/obsops/services/catalog", "github.com/obsops/obsops/services/catalog/postgres",
		"github.com/obsops/obsops/services/catalog/httpapi", "github.com/obsops/obsops/services/catalog/app")
}
