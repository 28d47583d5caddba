package ingest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestValidatePath(t *testing.T) {
	for _, ok := range []string{"a", "raw/2026-11-25/scan_001.fits", "a/b c/ü.dat", strings.Repeat("a", 1024), "...a", "a.b/.c"} {
		require.Empty(t, ValidatePath(ok), ok)
	}
	for _, bad := range []string{"", "/abs", "a/../b", "..", ".", "./a", "a/.", "a//b", "a/", "a\\b", "a\x00b", "a\nb", strings.Repeat("a", 1025), "\xff"} {
		require.NotEmpty(t, ValidatePath(bad), "%q", bad)
	}
}

func TestNormalizeChecksum(t *testing.T) {
	c, why := NormalizeChecksum("sha256:" + strings.Repeat("AB", 32))
	require.Empty(t, why)
	require.Equal(t, "sha256:"+strings.Repeat("ab", 32), c)
	c, why = NormalizeChecksum("xxh64:0123456789abcdef")
	require.Empty(t, why)
	require.Equal(t, "xxh64:0123456789abcdef", c)
	for _, bad := range []string{"", "sha256", "sha256:", "md5:" + strings.Repeat("a", 32), "sha256:" + strings.Repeat("a", 63),
		"xxh64:0123456789abcdeg", "SHA256:" + strings.Repeat("a", 64), "xxh64: 123456789abcdef"} {
		_, why := NormalizeChecksum(bad)
		require.NotEmpty(t, why, "%q", bad)
	}
}

func TestDecodeNamesTheField(t *testing.T) {
	cases := map[string]string{
		`{"executed_obs_unit_id":"x"}`:      "body.executed_obs_unit_id",
		`{"instrument_module_id":"eleven"}`: "body.instrument_module_id",
		`{"size_bytes":1e3}`:                "body.size_bytes",
		`{"path":7}`:                        "body.path",
		`{"nope":1}`:                        "body.nope",
		`[1]`:                               "body",
		`{"meta":"x"}`:                      "body.meta",
		`{} {}`:                             "body",
	}
	for body, loc := range cases {
		_, err := DecodeFile([]byte(body), "body")
		var ve ValidationError
		require.ErrorAs(t, err, &ve, body)
		var locs []string
		for _, f := range ve {
			locs = append(locs, f.Location)
		}
		require.Contains(t, locs, loc, body)
	}
	_, err := DecodeBulkFiles([]byte(`{"files":[{"path":"a"},{"path":"/b","nope":1}]}`))
	var ve ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "body.files[1].nope", ve[len(ve)-1].Location)
}

// fuzzCheck asserts what every decoder promises for any input: a value or a ValidationError whose
// every entry names a location under "body", never a panic; and a decoded file always passes
// the validators again.
func fuzzCheck(t *testing.T, err error) {
	if err == nil {
		return
	}
	var ve ValidationError
	if !errorAs(err, &ve) || len(ve) == 0 {
		t.Fatalf("not a ValidationError: %v", err)
	}
	for _, f := range ve {
		if !strings.HasPrefix(f.Location, "body") || f.Message == "" {
			t.Fatalf("bad field error %+v", f)
		}
	}
}

func errorAs(err error, ve *ValidationError) bool {
	v, ok := err.(ValidationError)
	*ve = v
	return ok
}

func checkFile(t *testing.T, f File) {
	if why := ValidatePath(f.Path); why != "" {
		t.Fatalf("decoded path %q fails: %s", f.Path, why)
	}
	if c, why := NormalizeChecksum(f.Checksum); why != "" || c != f.Checksum {
		t.Fatalf("decoded checksum %q not normalized", f.Checksum)
	}
	if f.SizeBytes < 0 || f.InstrumentModuleID < 1 || f.ExecutedObsUnitID == "" {
		t.Fatalf("decoded file out of range: %+v", f)
	}
	if !json.Valid(f.Meta) || f.Meta[0] != '{' {
		t.Fatalf("decoded meta %q is not an object", f.Meta)
	}
}

func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte(`{"executed_obs_unit_id":"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b","instrument_module_id":11,"path":"a/b.fits","size_bytes":1,"checksum":"xxh64:0123456789abcdef"}`))
	f.Add([]byte(`{"path":"../x","size_bytes":-1,"meta":[1]}`))
	f.Add([]byte(`{"id":null,"created_at":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		file, err := DecodeFile(body, "body")
		fuzzCheck(t, err)
		if err == nil {
			checkFile(t, file)
		}
	})
}

func FuzzDecodeBulkFiles(f *testing.F) {
	f.Add([]byte(`{"files":[{"executed_obs_unit_id":"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b","instrument_module_id":11,"path":"a","size_bytes":0,"checksum":"sha256:` + strings.Repeat("0", 64) + `"}]}`))
	f.Add([]byte(`{"files":[]}`))
	f.Add([]byte(`{"files":[{},{"id":"x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		files, err := DecodeBulkFiles(body)
		fuzzCheck(t, err)
		if err == nil {
			if len(files) < 1 || len(files) > MaxBulkFiles {
				t.Fatalf("%d files accepted", len(files))
			}
			for _, file := range files {
				checkFile(t, file)
			}
		}
	})
}

func FuzzDecodeOthers(f *testing.F) {
	f.Add([]byte(`{"obs_unit_id":1,"start_time":"2026-11-25T00:00:00Z"}`))
	f.Add([]byte(`{"end_time":"2026-11-25T00:00:00+02:00","status":"aborted"}`))
	f.Add([]byte(`{"executed_obs_unit_id":"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b","instrument_module_id":1,"name":"p","file_ids":["0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"]}`))
	f.Add([]byte(`{"size_bytes":0,"checksum":"xxh64:0123456789ABCDEF","file_ids":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := DecodeStart(body, "FYST")
		fuzzCheck(t, err)
		if err == nil && (s.ObsUnitID < 1 || s.StartTime.IsZero() || s.Site == "") {
			t.Fatalf("bad start %+v", s)
		}
		fin, err := DecodeFinish(body)
		fuzzCheck(t, err)
		if err == nil && fin.Status != StatusCompleted && fin.Status != StatusFailed && fin.Status != StatusAborted {
			t.Fatalf("bad finish status %q", fin.Status)
		}
		p, err := DecodePackage(body)
		fuzzCheck(t, err)
		if err == nil && (p.Name == "" || !utf8.ValidString(p.ExecutedObsUnitID)) {
			t.Fatalf("bad package %+v", p)
		}
		z, err := DecodeFinalize(body)
		fuzzCheck(t, err)
		if err == nil {
			if c, why := NormalizeChecksum(z.Checksum); why != "" || c != z.Checksum || z.SizeBytes < 0 {
				t.Fatalf("bad finalize %+v", z)
			}
		}
		_, err = DecodeFileUpdate(body)
		fuzzCheck(t, err)
	})
}

func FuzzValidators(f *testing.F) {
	f.Add("raw/a.fits")
	f.Add("sha256:" + strings.Repeat("a", 64))
	f.Add("a/../b")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidatePath(s) == "" {
			if s == "" || s[0] == '/' || len(s) > MaxPathBytes || strings.Contains(s, "//") || !utf8.ValidString(s) {
				t.Fatalf("path %q accepted", s)
			}
			for _, seg := range strings.Split(s, "/") {
				if seg == "." || seg == ".." {
					t.Fatalf("path %q with a dot segment accepted", s)
				}
			}
		}
		if c, why := NormalizeChecksum(s); why == "" {
			alg, hex, _ := strings.Cut(c, ":")
			if (alg != "sha256" || len(hex) != 64) && (alg != "xxh64" || len(hex) != 16) || strings.ToLower(hex) != hex {
				t.Fatalf("checksum %q accepted as %q", s, c)
			}
		}
		if id, ok := ParseUUID(s); ok && (len(id) != 36 || strings.ToLower(s) != id) {
			t.Fatalf("uuid %q accepted as %q", s, id)
		}
	})
}

// The one-pass decode of a bulk body finds what the file-by-file decode finds.
func TestDecodeBulkFilesOnePassMatchesFileByFile(t *testing.T) {
	eou := "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"
	body := []byte(`{"files":[{"executed_obs_unit_id":"` + eou + `","instrument_module_id":11,"path":"a","size_bytes":0,"checksum":"xxh64:0123456789ABCDEF","meta":{"k":1}},
		{"id":"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5c","executed_obs_unit_id":"` + eou + `","instrument_module_id":12,"path":"b/c","size_bytes":7,"checksum":"sha256:` + strings.Repeat("a", 64) + `","created_at":"2026-01-01T00:00:00Z"}]}`)
	files, err := DecodeBulkFiles(body)
	require.NoError(t, err)
	var r BulkFilesRequest
	require.NoError(t, json.Unmarshal(body, &r))
	for i, raw := range r.Files {
		one, err := DecodeFile(raw, "body")
		require.NoError(t, err)
		require.Equal(t, one, files[i])
	}
	// A file of the wrong shape: named, and the others' errors are reported too.
	_, err = DecodeBulkFiles([]byte(`{"files":[{"path":"/x"},7]}`))
	var ve ValidationError
	require.ErrorAs(t, err, &ve)
	var locs []string
	for _, f := range ve {
		locs = append(locs, f.Location)
	}
	require.Contains(t, locs, "body.files[0].path")
	require.Contains(t, locs, "body.files[1]")
}

// EncodeFilesTask is json.Marshal of the task, byte for byte.
func TestEncodeFilesTask(t *testing.T) {
	at := time.Date(2026, 11, 25, 1, 2, 3, 456, time.UTC)
	made := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	files := []File{
		{ID: "a", ExecutedObsUnitID: "e", InstrumentModuleID: 11, Path: "p<&>", SizeBytes: 1, Checksum: "xxh64:00", Meta: json.RawMessage(`{"k":"\u00e9"}`)},
		{ID: "b", ExecutedObsUnitID: "e", InstrumentModuleID: 12, Path: "q", CreatedAt: &made, RawDataPackageID: "pkg", Meta: json.RawMessage(`{}`)},
	}
	env := Envelope{TxID: "tx", AcceptedAt: at}
	want, err := json.Marshal(FilesTask{Envelope: env, Files: files})
	require.NoError(t, err)
	encoded := make([]json.RawMessage, len(files))
	for i, f := range files {
		encoded[i], err = json.Marshal(f)
		require.NoError(t, err)
	}
	got, err := EncodeFilesTask(env, encoded)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// FuzzDecodeFastAgrees holds DecodeBulkFiles' fast path to encoding/json: whatever decodeFast
// takes, decodeStrict takes too, to the same values — the fast path never accepts a body, or
// reads it otherwise, where encoding/json would not.
func FuzzDecodeFastAgrees(f *testing.F) {
	file := `{"executed_obs_unit_id":"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b","instrument_module_id":11,"path":"a/b.fits","size_bytes":1,"checksum":"xxh64:0123456789abcdef"}`
	for _, seed := range []string{
		`{"files":[` + file + `,` + file + `]}`,
		`{"FILES":[{"Path":"a","SIZE_BYTES":2}]}`,                    // encoding/json matches names regardless of case
		`{"files":[{"path":"a","path":"b","Path":"c"}]}`,             // the last of duplicate names wins
		`{"files":[{"path":"\xff\xfe","checksum":"\ud800x\u00e9"}]}`, // invalid UTF-8, a lone surrogate
		`{"files":[{"path":"a\"\\\/\b\f\n\r\t\u2028"}]}`,
		`{"files":[{"size_bytes":1e3,"instrument_module_id":-0,"meta":{"a":[1,2.5,{"b":null}],"c":"\u0000"}}]}`,
		`{"files":[{"id":null,"meta":null,"created_at":"2026-01-01T00:00:00Z"}]}`,
		`{"files":null}`, `{"files":[]}`, `{"files":[{}]} `, `{"files":[{}]} {}`, `{"files":[{"x":1}]}`, `{"x":1}`,
		"\ufeff{\"files\":[{}]}", `{"files":[{"size_bytes":"1"}]}`, `{"files":[{"meta":{"a":1,}}]}`, `[{"files":[]}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		type bulk struct {
			Files []FileRequest `json:"files"`
		}
		var fast, std bulk
		if !decodeFast(body, &fast) {
			return
		}
		if fe := decodeStrict(body, &std, "body"); fe != nil {
			t.Fatalf("decodeFast took %q, encoding/json refuses it: %s: %s", body, fe.Location, fe.Message)
		}
		require.Equal(t, std, fast, "%q", body)
	})
}

// TestDecodeTaskAgrees: DecodeTask reads every task the API encodes (encoding/json's output) to
// the same values as encoding/json.
func TestDecodeTaskAgrees(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 4, 5, 123456789, time.UTC)
	created := time.Date(2026, 11, 26, 23, 59, 59, 1, time.FixedZone("", -3*3600))
	env := Envelope{TxID: "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5c", AcceptedAt: at}
	files := []File{
		{ID: "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", ExecutedObsUnitID: "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5d", InstrumentModuleID: 1<<53 + 1,
			Path: "ü/\"q\"\\x<&>\u2028\t.fits", SizeBytes: 1<<62 + 3, Checksum: "xxh64:0123456789abcdef", CreatedAt: &created,
			RawDataPackageID: "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5e", Meta: json.RawMessage(`{"a":[1,2.5e-7,{"b":null}],"c":"\u0000"}`)},
		{ID: "0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5f", Path: "a", Meta: json.RawMessage(`null`)},
	}
	encoded := make([]json.RawMessage, len(files))
	for i, f := range files {
		encoded[i], _ = json.Marshal(f)
	}
	filesTask, err := EncodeFilesTask(env, encoded)
	require.NoError(t, err)
	start, _ := json.Marshal(StartTask{Envelope: env, Start: Start{ID: "x", ObsUnitID: 7, StartTime: created, Meta: json.RawMessage(`{"k":"v"}`)}})
	finish, _ := json.Marshal(FinishTask{Envelope: env, ID: "y", Finish: Finish{EndTime: at, Status: StatusFailed}})
	pkg, _ := json.Marshal(PackageTask{Envelope: env, Package: Package{ID: "z", Name: "n\u00e9", FileIDs: []string{"a", "b"}}})
	writes, _ := json.Marshal(WritesTask{Writes: []SubWrite{{Type: TaskFiles, Payload: filesTask}, {Type: TaskStart, Payload: start}}})
	agree := func(payload []byte, std, fast any) {
		require.NoError(t, json.Unmarshal(payload, std))
		require.NoError(t, DecodeTask(payload, fast))
		require.Equal(t, std, fast)
	}
	agree(filesTask, &FilesTask{}, &FilesTask{})
	agree(start, &StartTask{}, &StartTask{})
	agree(finish, &FinishTask{}, &FinishTask{})
	agree(pkg, &PackageTask{}, &PackageTask{})
	agree(writes, &WritesTask{}, &WritesTask{})
}

// TestBulkRefusesOnePathTwice: two files of one request at the same path of the same instrument
// module are refused naming both positions; the same path on another module is another file.
func TestBulkRefusesOnePathTwice(t *testing.T) {
	eou := NewID()
	file := func(module int, path string) string {
		return `{"executed_obs_unit_id":"` + eou + `","instrument_module_id":` + strconv.Itoa(module) + `,"path":"` + path +
			`","size_bytes":7,"checksum":"sha256:` + strings.Repeat("a", 64) + `"}`
	}
	_, err := DecodeBulkFiles([]byte(`{"files":[` + file(11, "s1/a.fits") + `,` + file(11, "s1/b.fits") + `,` + file(11, "s1/a.fits") + `]}`))
	var ve ValidationError
	require.ErrorAs(t, err, &ve)
	require.Len(t, ve, 1)
	require.Equal(t, "body.files[2].path", ve[0].Location)
	require.Contains(t, ve[0].Message, "body.files[0]")

	files, err := DecodeBulkFiles([]byte(`{"files":[` + file(11, "s1/a.fits") + `,` + file(12, "s1/a.fits") + `]}`))
	require.NoError(t, err, "another module's storage")
	require.Len(t, files, 2)
}
