package ingest

import (
	"encoding/json"
	"strconv"

	"github.com/obsops/obsops/pkg/jsonenc"
)

// AppendJSON appends f encoded exactly as json.Marshal(f) encodes it — the same bytes, so the
// same fingerprint (HashJSON), cache entry and task — without reflection: a bulk registration
// encodes each of its up to 10,000 files once, and json.Marshal was a quarter of the API's CPU
// time per bulk file (pprof, docs/benchmarks.md). Fields json.Marshal would transform (a string
// with a character it escapes, created_at, meta it would compact or escape) are encoded by
// json.Marshal itself; TestFileAppendJSON and FuzzFileAppendJSON hold the two to the same bytes.
func (f File) AppendJSON(dst []byte) ([]byte, error) {
	var err error
	dst = append(dst, `{"id":`...)
	dst = jsonenc.AppendString(dst, f.ID)
	dst = append(dst, `,"executed_obs_unit_id":`...)
	dst = jsonenc.AppendString(dst, f.ExecutedObsUnitID)
	dst = append(dst, `,"instrument_module_id":`...)
	dst = strconv.AppendInt(dst, f.InstrumentModuleID, 10)
	dst = append(dst, `,"path":`...)
	dst = jsonenc.AppendString(dst, f.Path)
	dst = append(dst, `,"size_bytes":`...)
	dst = strconv.AppendInt(dst, f.SizeBytes, 10)
	dst = append(dst, `,"checksum":`...)
	dst = jsonenc.AppendString(dst, f.Checksum)
	if f.CreatedAt != nil {
		dst = append(dst, `,"created_at":`...)
		if dst, err = appendMarshal(dst, f.CreatedAt); err != nil {
			return nil, err
		}
	}
	if f.RawDataPackageID != "" {
		dst = append(dst, `,"raw_data_package_id":`...)
		dst = jsonenc.AppendString(dst, f.RawDataPackageID)
	}
	dst = append(dst, `,"meta":`...)
	switch {
	case f.Meta == nil:
		dst = append(dst, "null"...)
	case plainJSON(f.Meta): // as validated meta nearly always is (checkMeta compacts it)
		dst = append(dst, f.Meta...)
	default: // compacted and HTML-escaped by json.Marshal
		if dst, err = appendMarshal(dst, f.Meta); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// plainJSON reports whether json.Marshal leaves raw as it is: valid JSON without a byte that
// compacting could remove (whitespace) or HTML escaping replace (<, >, &, and 0xE2, the first
// byte of U+2028 and U+2029) — conservatively, inside strings too.
func plainJSON(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xe2:
			return false
		}
	}
	return json.Valid(raw)
}

// appendMarshal appends json.Marshal(v).
func appendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}
