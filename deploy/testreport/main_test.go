package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTestJSON runs `go test -json` with args on the fixture module (one test of each outcome,
// and a package that does not build) and returns its stream, stdout and stderr together as make
// test pipes them; pass says whether go test should succeed.
func goTestJSON(t *testing.T, pass bool, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = filepath.Join("testdata", "fixture")
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if (err == nil) != pass {
		t.Fatalf("go test %v: error %v, want success %v:\n%s", args, err, pass, out)
	}
	return out
}

func TestReport(t *testing.T) {
	stream := goTestJSON(t, false, "./...")
	var out bytes.Buffer
	ok := run(bytes.NewReader(stream), &out, nil)
	text := out.String()
	if ok {
		t.Errorf("run reported success for a stream with a failure:\n%s", text)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if last := lines[len(lines)-1]; last != "3 passed, 2 failed, 2 skipped" {
		t.Errorf("last line %q, want the counts (TestPasses, TestParent and its subtest pass; TestFails and the broken package fail)\n%s", last, text)
	}
	for _, want := range []string{
		"it broke", // a failed test's output
		"--- FAIL: TestFails",
		"FAIL\texample.com/fixture", // the package's FAIL line
		"FAILED: example.com/fixture TestFails",
		"FAILED: example.com/fixture/broken — build failed",
		"SKIPPED: example.com/fixture TestParent/needs_a_browser — chromium not installed",
		"SKIPPED: example.com/fixture TestSkips — no tool: install it with the package manager",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"=== RUN", "fine", "checking for the tool"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("%q printed: passing and skipped tests' output stays quiet, as go test's\n%s", unwanted, text)
		}
	}
}

func TestRequired(t *testing.T) {
	stream := goTestJSON(t, false, "./...")
	required, err := parseRequired(strings.NewReader(`
# a comment
example.com/fixture TestPasses            # passes: fine
example.com/fixture TestParent/needs_a_browser
example.com/fixture TestRenamed
`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	run(bytes.NewReader(stream), &out, required)
	text := out.String()
	for _, want := range []string{
		"REQUIRED BUT SKIPPED: example.com/fixture TestParent/needs_a_browser — chromium not installed",
		"REQUIRED BUT DID NOT RUN: example.com/fixture TestRenamed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "REQUIRED BUT SKIPPED: example.com/fixture TestPasses") || strings.Contains(text, "DID NOT RUN: example.com/fixture TestPasses") {
		t.Errorf("a required test that passed is reported:\n%s", text)
	}

	// all required tests passed, nothing failed: success
	required, err = parseRequired(strings.NewReader("example.com/fixture TestPasses\n"))
	if err != nil {
		t.Fatal(err)
	}
	passing := goTestJSON(t, true, "-run", "TestPasses|TestSkips", ".")
	out.Reset()
	if !run(bytes.NewReader(passing), &out, required) {
		t.Errorf("run failed a stream where the required test passed and nothing failed:\n%s", out.String())
	}
}
