// Package jsonenc appends JSON strings byte for byte as encoding/json writes them, without
// reflection. It is for the records obsops encodes by hand because encoding/json's reflection
// was their largest cost: ingest's bulk files (File.AppendJSON), the CLI's bulk bodies and state
// lines, the access log. Their bytes must equal encoding/json's, because fingerprints and
// idempotency keys are computed from them. A string of printable ASCII with nothing to escape
// (paths, ids, checksums: nearly every string) is copied between quotes; any other string is
// encoded by encoding/json itself, so the two never differ (TestAppendString, FuzzAppendString).
package jsonenc

import (
	"bytes"
	"encoding/json"
)

// AppendString appends s as json.Marshal encodes it, with HTML's <, > and & escaped.
func AppendString(dst []byte, s string) []byte {
	if plain(s, true) {
		return appendQuoted(dst, s)
	}
	b, _ := json.Marshal(s) // a string always encodes
	return append(dst, b...)
}

// AppendStringNoHTML appends s as a json.Encoder with SetEscapeHTML(false) writes it: what
// log/slog's JSON handler writes, so a hand-encoded log line reads like slog's.
func AppendStringNoHTML(dst []byte, s string) []byte {
	if plain(s, false) {
		return appendQuoted(dst, s)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// plain reports whether encoding/json writes s as it is between quotes: printable ASCII without
// '"' or '\\' (nor <, > and & when escapeHTML).
func plain(s string, escapeHTML bool) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f || c == '"' || c == '\\':
			return false
		case escapeHTML && (c == '<' || c == '>' || c == '&'):
			return false
		}
	}
	return true
}

func appendQuoted(dst []byte, s string) []byte {
	return append(append(append(dst, '"'), s...), '"')
}
