package cmd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// TestFileIDIsStable pins the id scheme: state files and registrations made by earlier versions
// name their files with these ids, so a change here would register files twice.
func TestFileIDIsStable(t *testing.T) {
	for _, c := range []struct {
		exec   string
		module int64
		path   string
		want   string
	}{
		{"01a2200b-59a6-7ca6-a675-9553d1f286bd", 11, "d00/f00001.dat", "ff4d2696-292e-813d-ae44-7aabf9709a34"},
		{"01a2200b-59a6-7ca6-a675-9553d1f286bd", -3, "été/ü.fits", "fe9bc0b5-8f79-8f5c-8e98-21a42a79289d"},
	} {
		if got := fileID(c.exec, c.module, c.path); got != c.want {
			t.Errorf("fileID(%s, %d, %s) = %s, want %s", c.exec, c.module, c.path, got, c.want)
		}
	}
}

// TestChecksummer: the digests and sizes of files of several lengths (empty, one read, several
// reads of the buffer) are those of the hash packages over the same bytes, with one checksummer
// reused across files and algorithms; a missing file is an error naming it.
func TestChecksummer(t *testing.T) {
	dir := t.TempDir()
	c := NewChecksummer()
	for _, n := range []int{0, 1, 1000, 64 << 10, 200<<10 + 7} {
		body := []byte(strings.Repeat("obsops", n/6+1)[:n])
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		shaSum := sha256.Sum256(body)
		xxh := xxhash.Sum64(body)
		for alg, want := range map[string]string{
			"sha256": "sha256:" + hex.EncodeToString(shaSum[:]),
			"xxh64":  "xxh64:" + hex.EncodeToString([]byte{byte(xxh >> 56), byte(xxh >> 48), byte(xxh >> 40), byte(xxh >> 32), byte(xxh >> 24), byte(xxh >> 16), byte(xxh >> 8), byte(xxh)}),
		} {
			sum, size, err := c.SumSize(p, alg)
			if err != nil {
				t.Fatal(err)
			}
			if sum != want || size != int64(n) {
				t.Errorf("%d bytes, %s: %s (%d bytes), want %s", n, alg, sum, size, want)
			}
		}
	}
	if _, _, err := c.SumSize(filepath.Join(dir, "missing"), "xxh64"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: %v", err)
	}
	// Files of other directories in turn (each reopened relative to its own), and a relative path.
	for i, d := range []string{"a", "b", "a", "a/c", "b"} {
		full := filepath.Join(dir, d, "same.dat")
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256([]byte(d))
		if sum, size, err := c.SumSize(full, "sha256"); err != nil || sum != "sha256:"+hex.EncodeToString(want[:]) || size != int64(len(d)) {
			t.Errorf("file %d in %s: %s %d %v", i, d, sum, size, err)
		}
	}
	t.Chdir(filepath.Join(dir, "a"))
	want := sha256.Sum256([]byte("a"))
	if sum, _, err := c.SumSize("same.dat", "sha256"); err != nil || sum != "sha256:"+hex.EncodeToString(want[:]) {
		t.Errorf("a relative path: %s %v", sum, err)
	}
	c.Close()
}

// TestReadStateInFlight reads a state file as a run with two requests in flight leaves it when
// killed: batches planned in order, their answers in any order, one batch never answered and a
// last line cut short. The unanswered batch is to be resent with its key and files; the
// answered ones are done, whatever the order of their lines; the cut line is dropped before a
// resumed run appends (lines after it would never be read), and a file that is no state file
// is refused, untouched.
func TestReadStateInFlight(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.jsonl")
	r := &registration{execution: "01a2200b-59a6-7ca6-a675-9553d1f286bd", module: 11, algorithm: "xxh64", statePath: state}
	lines := []string{
		`{"dir":"/data","execution":"01a2200b-59a6-7ca6-a675-9553d1f286bd","module":11,"checksum":"xxh64"}`,
		`{"batch":0,"key":"register-a","files":[{"id":"i0","path":"a","size_bytes":1,"checksum":"xxh64:00"}]}`,
		`{"batch":1,"key":"register-b","files":[{"id":"i1","path":"b","size_bytes":2,"checksum":"xxh64:01"}]}`,
		`{"done":1,"transaction_id":"t1","status":"buffered"}`,
		`{"batch":2,"key":"register-c","files":[{"id":"i2","path":"c","size_bytes":3,"checksum":"xxh64:02"}]}`,
		`{"done":0,"transaction_id":"t0","status":"buffered"}`,
		`{"batch":3,"key":"register-d","files":[{"id":"i3","pa`,
	}
	if err := os.WriteFile(state, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	batches, valid, err := r.readState()
	if err != nil {
		t.Fatal(err)
	}
	if whole := int64(len(strings.Join(lines[:6], "\n")) + 1); valid != whole {
		t.Errorf("%d bytes of whole lines, want %d", valid, whole)
	}
	if len(batches) != 3 {
		t.Fatalf("%d batches, want 3 (the cut line is no batch)", len(batches))
	}
	for i, want := range []struct {
		done bool
		tx   string
		key  string
		path string
	}{{true, "t0", "register-a", "a"}, {true, "t1", "register-b", "b"}, {false, "", "register-c", "c"}} {
		b := batches[i]
		if b.n != i || b.done != want.done || b.txID != want.tx || b.key != want.key || len(b.files) != 1 || b.files[0].Path != want.path {
			t.Errorf("batch %d: %+v, want %+v", i, *b, want)
		}
	}
	// A resumed run drops the cut line before it appends: what it appends is read again.
	if err := dropCutLine(state, valid); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(state, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"done":2,"transaction_id":"t2","status":"buffered"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if batches, _, err = r.readState(); err != nil || len(batches) != 3 || !batches[2].done {
		t.Errorf("after the resumed run's line: %v %+v", err, batches)
	}
	// Another registration's state file is refused.
	r.module = 12
	if _, _, err := r.readState(); err == nil || !strings.Contains(err.Error(), "another registration") {
		t.Errorf("another module's state: %v", err)
	}
	// A file that is no state file at all is refused, and left as it is.
	other := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(other, []byte("not a state file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.statePath = other
	_, valid, err = r.readState()
	if err != nil || valid != 0 {
		t.Fatalf("notes: %d %v", valid, err)
	}
	if err := dropCutLine(other, valid); err == nil || !strings.Contains(err.Error(), "not the state file") {
		t.Errorf("notes: %v", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "not a state file\n" {
		t.Errorf("notes changed: %q", b)
	}
}

// TestWalk lists regular files only (no symbolic link, no directory), relative and slash
// separated, in the order of the full paths ("a-b/x" before "a/x"), without the state file.
func TestWalk(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/x", "a-b/x", "a/c/y", "z", "state.jsonl"} {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "z"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{dir, dir + string(filepath.Separator)} {
		got, err := walk(root, filepath.Join(dir, "state.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "a-b/x a/c/y a/x z"; strings.Join(got, " ") != want {
			t.Errorf("walk(%s) = %v, want %s", root, got, want)
		}
	}
}

// TestBulkBodyIsJSONMarshal: the bulk body written directly is byte for byte what json.Marshal
// makes of the same files (a resent batch carries the body of its first sending), with and
// without a package, for paths that need escaping (quotes, HTML characters, control characters,
// non-ASCII, invalid UTF-8, U+2028) and for ones that do not.
func TestBulkBodyIsJSONMarshal(t *testing.T) {
	type wire struct {
		ID                 string `json:"id"`
		ExecutedObsUnitID  string `json:"executed_obs_unit_id"`
		InstrumentModuleID int64  `json:"instrument_module_id"`
		Path               string `json:"path"`
		SizeBytes          int64  `json:"size_bytes"`
		Checksum           string `json:"checksum"`
		RawDataPackageID   string `json:"raw_data_package_id,omitempty"`
	}
	var files []registerFile
	for i, p := range []string{"d00/f00001.dat", `a "quoted" \\ name`, "x<y>&z", "tab\there\x01", "été/ü.fits", "bad\xffutf8", "line\u2028sep", "~!#$%^*()_+{}|:?`-=[];',./"} {
		files = append(files, registerFile{ID: fileID("01a2200b-59a6-7ca6-a675-9553d1f286bd", 11, p), Path: p, Size: int64(i * 1000), Checksum: "xxh64:0123456789abcdef"})
	}
	for _, pkg := range []string{"", "01a2200b-59a6-7ca6-a675-9553d1f286be"} {
		r := &registration{execution: "01a2200b-59a6-7ca6-a675-9553d1f286bd", module: -11, pkg: pkg}
		ws := make([]wire, len(files))
		for i, f := range files {
			ws[i] = wire{ID: f.ID, ExecutedObsUnitID: r.execution, InstrumentModuleID: r.module, Path: f.Path, SizeBytes: f.Size, Checksum: f.Checksum, RawDataPackageID: pkg}
		}
		want, err := json.Marshal(map[string]any{"files": ws})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.bulkBody(files); string(got) != string(want) {
			t.Errorf("package %q:\n got %s\nwant %s", pkg, got, want)
		}
	}
}

// TestPlannedLineIsJSONMarshal: the "planned" line written directly is json.Marshal's of the
// same stateLine, so readState reads it like any other.
func TestPlannedLineIsJSONMarshal(t *testing.T) {
	files := []registerFile{
		{ID: "ff4d2696-292e-813d-ae44-7aabf9709a34", Path: "d00/f00001.dat", Size: 0, Checksum: "xxh64:0123456789abcdef"},
		{ID: "fe9bc0b5-8f79-8f5c-8e98-21a42a79289d", Path: "é \"<q>\" \\ \x01 \xff", Size: 1 << 40, Checksum: "sha256:00"},
	}
	for _, b := range []*batchState{{n: 0, key: "register-a", files: files}, {n: 12345, key: "register-b", files: files[:1]}} {
		var w stateWriter
		w.addPlanned(b)
		want, err := json.Marshal(stateLine{Batch: &b.n, Key: b.key, Files: b.files})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(w.buf); got != string(want)+"\n" {
			t.Errorf("batch %d:\n got %s\nwant %s", b.n, got, want)
		}
	}
}

// TestRunWithNothingLeftEnds runs a registration whose every file is acknowledged in its state
// file, many times: each must end at once, sending nothing. (The describer, with nothing to
// describe, closes its channel at any moment of the loop; a close seen while nothing was in
// flight once left the loop waiting for an answer that could never come.)
func TestRunWithNothingLeftEnds(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state.jsonl")
	lines := `{"dir":"` + dir + `","execution":"01a2200b-59a6-7ca6-a675-9553d1f286bd","module":11,"checksum":"xxh64"}
{"batch":0,"key":"register-a","files":[{"id":"i0","path":"a","size_bytes":1,"checksum":"xxh64:00"}]}
{"done":0,"transaction_id":"t0","status":"buffered"}
`
	if err := os.WriteFile(state, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		r := &registration{dir: dir, execution: "01a2200b-59a6-7ca6-a675-9553d1f286bd", module: 11, algorithm: "xxh64",
			batch: 100, workers: 1, inFlight: 2, statePath: state, stderr: io.Discard}
		done := make(chan error, 1)
		go func() {
			_, err := r.run(context.Background(), nil, "") // nothing to send: no client needed
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d with nothing left to register did not end", i)
		}
	}
}
