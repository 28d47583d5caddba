// Command testreport turns `go test -json` (on standard input) into what `make test` prints: the
// usual output of go test as it comes (each package's ok/FAIL line, a failed test's output), then
// every failed and every skipped test with its reason, then, as the very last line,
// "N passed, N failed, N skipped". A skip is easy to miss among hundreds of ok lines and hides a
// check that did not run (a missing tool, no root); this makes each one visible and counted.
//
//	go test -json ./... 2>&1 | testreport [-require FILE]
//
// -require names a file of tests that must have run and passed (CI's .ci/required-tests): one
// "IMPORT/PATH TestName[/subtest]" per line, # comments. A required test that was skipped or
// did not run at all fails the report. It exits 1 when a test or a package (its build included)
// failed, or a required test did not pass.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	require := flag.String("require", "", "file listing the tests that must run and pass (IMPORT/PATH TestName per line)")
	flag.Parse()
	var required []testID
	if *require != "" {
		f, err := os.Open(*require)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		required, err = parseRequired(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", *require, err)
			os.Exit(2)
		}
	}
	if !run(os.Stdin, os.Stdout, required) {
		os.Exit(1)
	}
}

// run reads the event stream from in, writes the report to out and reports whether everything
// passed (and every required test ran and passed).
func run(in io.Reader, out io.Writer, required []testID) bool {
	r := newReport(out)
	if err := r.read(in); err != nil {
		fmt.Fprintln(out, "testreport: reading go test's output:", err)
		r.broken = true
	}
	return r.finish(required)
}
