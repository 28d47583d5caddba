package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedCatalogueIsCurrent rebuilds data/dso.tsv from its inputs in the repository and
// compares it with the committed file: the shipped catalogue is reproducible (run `go generate
// ./...` in services/catalog after changing an input).
func TestGeneratedCatalogueIsCurrent(t *testing.T) {
	dir := filepath.Join("..", "..", "data")
	want, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "dso.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("data/dso.tsv differs from what its inputs give: run go generate ./... in services/catalog")
	}
}

func TestDisplayName(t *testing.T) {
	for in, want := range map[string]string{"NGC0253": "NGC 253", "IC4553": "IC 4553", "IC0359A": "IC 359A",
		"NGC1234NED01": "NGC 1234 NED01", "Mel022": "Mel022"} {
		if got := DisplayName(in); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
