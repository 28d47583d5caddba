package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/obsops/obsops/cli/internal/gen"
)

// TestGeneratedClientIsFresh regenerates client/api from client/openapi.json with the pinned
// generator and fails when the checked-in code differs: run `make generate`. (That the snapshot
// itself is the gateway's current document is TestCLI/OpenAPISnapshotIsCurrent.)
func TestGeneratedClientIsFresh(t *testing.T) {
	doc, err := os.ReadFile(snapshotPath())
	if err != nil {
		t.Fatal(err)
	}
	want, err := gen.Generate(doc)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join("..", "client", "api", "api.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatal("client/api/api.gen.go is stale: run `make generate`")
	}
}

// TestDowngradeIsOpenAPI30 checks the document the generator reads: OpenAPI 3.0.3, no 3.1 type
// arrays left.
func TestDowngradeIsOpenAPI30(t *testing.T) {
	doc, err := os.ReadFile(snapshotPath())
	if err != nil {
		t.Fatal(err)
	}
	down, err := gen.Downgrade(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(down, []byte(`"openapi":"3.0.3"`)) {
		t.Fatalf("not downgraded: %.200s", down)
	}
	if bytes.Contains(down, []byte(`"type":["`)) {
		t.Fatal("a 3.1 type array survived the downgrade")
	}
	if !bytes.Contains(down, []byte(`"/idp/token"`)) {
		t.Fatal("the document lacks /idp/token")
	}
}
