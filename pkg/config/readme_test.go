package config_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDocumentsEveryVariable keeps the configuration table honest: every OPS_* variable a
// binary reads (an `env:"OPS_..."` tag outside tests) must appear in README.md.
func TestREADMEDocumentsEveryVariable(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tag := regexp.MustCompile(`env:"(OPS_[A-Z0-9_]+)"`)
	found := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".local" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range tag.FindAllStringSubmatch(string(src), -1) {
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 20 {
		t.Fatalf("found only %d variables: is the walk broken?", len(found))
	}
	for name, path := range found {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("%s (read in %s) is missing from README.md's configuration table", name, path)
		}
	}
}
