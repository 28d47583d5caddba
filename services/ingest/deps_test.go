package ingest_test

import (
	"testing"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestHTTPLayerUsesOnlyTheDomain: the HTTP layer decodes, calls ingest.Service and encodes; it
// reaches the database and Redis only through the service's interfaces, so it links neither
// services/ingest/postgres nor services/ingest/buffer (app wires them in).
func TestHTTPLayerUsesOnlyTheDomain(t *testing.T) {
	testenv.RequireNoDeps(t, "./httpapi", "github.com/obsops/obsops/services/ingest/postgres", "github.com/obsops/obsops/services/ingest/buffer")
}

// TestDomainImportsNoAdapter: the root package declares the interfaces it needs (Store,
// Buffer, Direct); postgres and buffer implement them, never the other way round.
func TestDomainImportsNoAdapter(t *testing.T) {
	testenv.RequireNoDeps(t, ".", "github.com/obsops/obsops/services/ingest/")
}
