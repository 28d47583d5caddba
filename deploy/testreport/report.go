package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // on a package's fail: the package whose build failed
}

// testID names one test (or subtest, as go test spells it: spaces become underscores).
type testID struct{ pkg, test string }

func (id testID) String() string { return id.pkg + " " + id.test }

// outcome is a finished test's result; a skip keeps its reason.
type outcome struct {
	action string // pass, fail or skip
	reason string
}

// report follows the event stream: it prints what go test would print without -json and
// remembers each test's outcome for the summary.
type report struct {
	out      io.Writer
	buffered map[testID][]string // output of the tests still running
	order    []testID            // tests in the order they started, to find those that never finished
	outcomes map[testID]outcome
	pkgFails []string // packages that failed without a test of theirs failing (build, TestMain, timeout)
	pkgFail  map[string]bool
	events   int
	broken   bool // the stream could not be read to its end
}

func newReport(out io.Writer) *report {
	return &report{out: out, buffered: map[testID][]string{}, outcomes: map[testID]outcome{}, pkgFail: map[string]bool{}}
}

// read consumes the stream; a line that is not an event (go test's own errors on stderr, when
// both are piped in) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintln(r.out, string(line))
			continue
		}
		r.events++
		r.handle(e)
	}
	return sc.Err()
}

// handle prints or buffers one event and records outcomes.
func (r *report) handle(e event) {
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Action == "build-fail":
	case e.Test == "":
		r.handlePackage(e)
	default:
		id := testID{e.Package, e.Test}
		switch e.Action {
		case "run":
			r.order = append(r.order, id)
		case "output":
			r.buffered[id] = append(r.buffered[id], e.Output)
		case "pass", "fail", "skip":
			o := outcome{action: e.Action}
			if e.Action == "skip" {
				o.reason = skipReason(r.buffered[id])
			}
			if e.Action == "fail" {
				for _, l := range r.buffered[id] {
					if !isMarker(l) {
						fmt.Fprint(r.out, l)
					}
				}
			}
			r.outcomes[id] = o
			delete(r.buffered, id)
		}
	}
}

// handlePackage prints a package's own output (its ok/FAIL line, a panic outside a test) and
// notes a package that failed without a failed test to show for it.
func (r *report) handlePackage(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" && !isMarker(e.Output) {
			fmt.Fprint(r.out, e.Output)
		}
	case "fail":
		failedTest := false
		for id, o := range r.outcomes {
			if id.pkg == e.Package && o.action == "fail" {
				failedTest = true
				break
			}
		}
		if !failedTest && !r.pkgFail[e.Package] {
			why := "the package failed outside its tests (TestMain, a timeout or a crash: see its output above)"
			if e.FailedBuild != "" {
				why = "build failed"
			}
			r.pkgFail[e.Package] = true
			r.pkgFails = append(r.pkgFails, e.Package+" — "+why)
		}
	}
}

// isMarker reports go test -v's progress lines (=== RUN and the like), which plain go test
// does not print.
func isMarker(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// logLine is the start of a t.Log / t.Skip entry: indentation, file:line, then the text.
var logLine = regexp.MustCompile(`^\s*[\w.\-]+\.go:\d+: ?`)

// skipReason is the last entry the test logged before it skipped (t.Skip's message), on one line.
func skipReason(output []string) string {
	var entry []string
	for _, l := range output {
		l = strings.TrimRight(l, "\n")
		switch {
		case isMarker(l), strings.HasPrefix(strings.TrimSpace(l), "--- SKIP"):
		case logLine.MatchString(l):
			entry = []string{logLine.ReplaceAllString(l, "")}
		case entry != nil && strings.TrimSpace(l) != "":
			entry = append(entry, strings.TrimSpace(l)) // continuation of a multi-line entry
		}
	}
	if entry == nil {
		return "(no reason given)"
	}
	return strings.Join(entry, " ")
}

// finish prints the failures, the skips and the required tests that did not pass, then the
// counts as the very last line, and reports whether all is well.
func (r *report) finish(required []testID) bool {
	var failed, skipped, unfinished []string
	passed := 0
	ids := make([]testID, 0, len(r.outcomes))
	for id := range r.outcomes {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b testID) int { return strings.Compare(a.String(), b.String()) })
	for _, id := range ids {
		switch o := r.outcomes[id]; o.action {
		case "pass":
			passed++
		case "fail":
			failed = append(failed, id.String())
		case "skip":
			skipped = append(skipped, id.String()+" — "+o.reason)
		}
	}
	for _, id := range r.order {
		if _, done := r.outcomes[id]; !done && !slices.Contains(unfinished, id.String()) {
			unfinished = append(unfinished, id.String())
		}
	}
	var missing []string
	for _, id := range required {
		switch o, ok := r.outcomes[id]; {
		case !ok:
			missing = append(missing, "REQUIRED BUT DID NOT RUN: "+id.String()+" (renamed? update the list of required tests)")
		case o.action == "skip":
			missing = append(missing, "REQUIRED BUT SKIPPED: "+id.String()+" — "+o.reason)
		}
	}
	if len(failed)+len(unfinished)+len(r.pkgFails)+len(skipped)+len(missing) > 0 {
		fmt.Fprintln(r.out)
	}
	for _, f := range failed {
		fmt.Fprintln(r.out, "FAILED: "+f)
	}
	for _, f := range unfinished {
		fmt.Fprintln(r.out, "FAILED: "+f+" — did not finish (see the package's output above)")
	}
	for _, f := range r.pkgFails {
		fmt.Fprintln(r.out, "FAILED: "+f)
	}
	for _, s := range skipped {
		fmt.Fprintln(r.out, "SKIPPED: "+s)
	}
	for _, m := range missing {
		fmt.Fprintln(r.out, m)
	}
	nFailed := len(failed) + len(unfinished) + len(r.pkgFails)
	if r.events == 0 && !r.broken {
		fmt.Fprintln(r.out, "testreport: no test events: go test did not run (see above)")
		r.broken = true
	}
	fmt.Fprintf(r.out, "%d passed, %d failed, %d skipped\n", passed, nFailed, len(skipped))
	return nFailed == 0 && len(missing) == 0 && !r.broken
}

// parseRequired reads "IMPORT/PATH TestName" lines; blank lines and # comments are ignored.
func parseRequired(in io.Reader) ([]testID, error) {
	var ids []testID
	sc := bufio.NewScanner(in)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "#"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"IMPORT/PATH TestName\", got %q", n, line)
		}
		ids = append(ids, testID{f[0], f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("no tests listed")
	}
	return ids, nil
}
