package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// noHTML is what a json.Encoder with SetEscapeHTML(false) writes for s, without its newline.
func noHTML(t testing.TB, s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// check holds both functions to encoding/json for s, appended after a prefix.
func check(t testing.TB, s string) {
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("p"), s); string(got) != "p"+string(want) {
		t.Errorf("AppendString(%q) = %s, want %s", s, got[1:], want)
	}
	if got, want := AppendStringNoHTML([]byte("p"), s), noHTML(t, s); string(got) != "p"+want {
		t.Errorf("AppendStringNoHTML(%q) = %s, want %s", s, got[1:], want)
	}
}

// TestAppendString: plain strings, every byte json escapes (quotes, backslashes, control
// characters, DEL, HTML's <>&), U+2028 and U+2029, invalid UTF-8, other non-ASCII text.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "2026/11/29/scan_0001/a.fits", "xxh64:0123456789abcdef", `a"b`, `a\b`,
		"a\tb\nc\x01", "a\x7fb", "<a>&b", "ü/ñ.fits", "a\u2028b\u2029", "\xff\xfe", "日本/データ", "~ !#$%'()*+,-./:;=?@[]^_`{|}"} {
		check(t, s)
	}
	for c := range 256 {
		check(t, string([]byte{'a', byte(c), 'b'}))
	}
}

// FuzzAppendString: for any string, both functions write encoding/json's bytes (go test runs
// the seeds; go test -fuzz=FuzzAppendString searches further).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"raw/a.fits", "a\"\\<>&", "\u2028\xff\x00", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}
