package ingest

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFileAppendJSON: File.AppendJSON writes exactly json.Marshal's bytes — a file's fingerprint
// must not depend on which of the two encoded it (an API of the previous release, a replay) —
// for the files the API registers and for every field json.Marshal transforms: strings it
// escapes (quotes, backslashes, control characters, HTML's <>&, U+2028, invalid UTF-8), a
// creation time, a package, meta with whitespace and HTML to compact and escape.
func TestFileAppendJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 123456789, time.FixedZone("", 3600))
	plain := File{ID: NewID(), ExecutedObsUnitID: NewID(), InstrumentModuleID: 14, Path: "2026/11/29/scan_0001/a.fits",
		SizeBytes: 1 << 40, Checksum: "xxh64:0123456789abcdef"}
	files := []File{plain, {}, {InstrumentModuleID: math.MaxInt64, SizeBytes: math.MinInt64}}
	for _, p := range []string{`a"b`, `a\b`, "a\tb\nc\x01", "<a>&b", "ü/ñ.fits", "a\u2028b\u2029", "\xff\xfe", "a\x7fb", "日本/データ"} {
		f := plain
		f.Path, f.ExecutedObsUnitID = p, p
		files = append(files, f)
	}
	withTime, withPackage, withMeta, emptyMeta := plain, plain, plain, plain
	withTime.CreatedAt = &at
	withPackage.RawDataPackageID = NewID()
	withMeta.Meta = json.RawMessage(" { \"a\" : [1, 2.50, \"<x>&\u2028\"],\n\t\"b\": {\"c\": null} } ")
	emptyMeta.Meta = json.RawMessage(`{}`)
	files = append(files, withTime, withPackage, withMeta, emptyMeta)
	for _, m := range []string{`{"a":1,"b":[true,null,"x y"],"c":{"d":-1.5e3}}`, `{"a":"\u003c"}`, `{"a":"é"}`, `{"a":"\u2028"}`, "{\"a\":\"\u2028\"}", `[]`, `"s"`, `1`} {
		f := plain
		f.Meta = json.RawMessage(m)
		files = append(files, f)
	}
	for _, f := range files {
		want, err := json.Marshal(f)
		require.NoError(t, err)
		got, err := f.AppendJSON([]byte("prefix"))
		require.NoError(t, err)
		require.Equal(t, "prefix"+string(want), string(got), "%+v", f)
	}

	// What json.Marshal refuses, AppendJSON refuses: meta that is not JSON.
	for _, m := range []string{`{"a":`, `{"a":1}}`, `{a:1}`} {
		bad := plain
		bad.Meta = json.RawMessage(m)
		_, want := json.Marshal(bad)
		require.Error(t, want, m)
		_, err := bad.AppendJSON(nil)
		require.Error(t, err, m)
	}
}

// FuzzFileAppendJSON: for any strings and numbers, AppendJSON and json.Marshal agree (go test
// runs the seeds; go test -fuzz=FuzzFileAppendJSON searches further).
func FuzzFileAppendJSON(f *testing.F) {
	f.Add("0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", "raw/a.fits", int64(14), int64(1), "xxh64:0123456789abcdef", "", []byte(nil))
	f.Add("x", "y", int64(0), int64(0), "z", "", []byte(`{"k":"v","n":[1,2.5,{"m":null}]}`))
	f.Add("a\"\\<>&", "\u2028\xff\x00", int64(-1), int64(math.MaxInt64), "\t", "pkg", []byte(` {"a": "<b>"} `))
	f.Fuzz(func(t *testing.T, id, path string, module, size int64, sum, pkg string, meta []byte) {
		file := File{ID: id, ExecutedObsUnitID: id, InstrumentModuleID: module, Path: path, SizeBytes: size, Checksum: sum,
			RawDataPackageID: pkg, Meta: meta}
		want, werr := json.Marshal(file)
		got, gerr := file.AppendJSON(nil)
		if werr != nil {
			require.Error(t, gerr)
			return
		}
		require.NoError(t, gerr)
		require.Equal(t, string(want), string(got))
	})
}
