package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/problem"
)

// Executed obs unit statuses: running → completed | failed | aborted.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusAborted   = "aborted"
)

// Raw data package statuses: building → complete (immutable).
const (
	PackageBuilding = "building"
	PackageComplete = "complete"
)

// maxInt32 bounds instrument module ids (an integer column).
const maxInt32 = math.MaxInt32

// Int is an integer field kept raw until validation, so that a value of the wrong type is
// refused with the field's name (encoding/json's own errors do not name it).
type Int json.RawMessage

// UnmarshalJSON keeps the raw value.
func (i *Int) UnmarshalJSON(b []byte) error { *i = append((*i)[:0], b...); return nil }

// Schema documents Int as an integer.
func (Int) Schema(huma.Registry) *huma.Schema { return &huma.Schema{Type: "integer", Format: "int64"} }

// StartRequest is the body of POST /executed_obs_units/start as sent (docs/api.md). Fields are
// pointers so that a missing field is told apart from a zero one.
type StartRequest struct {
	ID                 *string         `json:"id,omitempty" format:"uuid" doc:"Client-chosen id (UUID); a retry with the same id and body is answered like the first. Assigned (UUIDv7) when absent."`
	ObsUnitID          *Int            `json:"obs_unit_id" required:"true" doc:"The planned obs unit (catalog) being executed."`
	InstrumentModuleID *Int            `json:"instrument_module_id,omitempty" doc:"Instrument module used, if one."`
	StartTime          *string         `json:"start_time" required:"true" format:"date-time"`
	Site               *string         `json:"site,omitempty" doc:"Where it runs; default this site (OPS_SITE_NAME)."`
	Meta               json.RawMessage `json:"meta,omitempty" doc:"Any JSON object (at most 16 KiB)."`
}

// FinishRequest is the body of PUT /executed_obs_units/{id}/finish.
type FinishRequest struct {
	EndTime *string         `json:"end_time" required:"true" format:"date-time"`
	Status  *string         `json:"status,omitempty" enum:"completed,failed,aborted" doc:"Default completed."`
	Meta    json.RawMessage `json:"meta,omitempty" doc:"Any JSON object, merged over the start's meta."`
}

// FileRequest is the body of POST /raw_data_files/ and one entry of a bulk registration.
type FileRequest struct {
	ID                 *string         `json:"id,omitempty" format:"uuid" doc:"Client-chosen id; assigned (UUIDv7) when absent."`
	ExecutedObsUnitID  *string         `json:"executed_obs_unit_id" required:"true" format:"uuid"`
	InstrumentModuleID *Int            `json:"instrument_module_id" required:"true"`
	Path               *string         `json:"path" required:"true" doc:"Relative path: no leading /, no . or .. segment, at most 1024 bytes."`
	SizeBytes          *Int            `json:"size_bytes" required:"true" minimum:"0"`
	Checksum           *string         `json:"checksum" required:"true" doc:"sha256:<64 hex> or xxh64:<16 hex>."`
	CreatedAt          *string         `json:"created_at,omitempty" format:"date-time" doc:"When the file was written; default when it was registered."`
	RawDataPackageID   *string         `json:"raw_data_package_id,omitempty" format:"uuid"`
	Meta               json.RawMessage `json:"meta,omitempty"`
}

// BulkFilesRequest is the body of POST /raw_data_files/bulk: 1–10,000 files, all or nothing.
type BulkFilesRequest struct {
	Files []json.RawMessage `json:"files" required:"true" minItems:"1" maxItems:"10000"`
}

// bulkFilesDoc documents the bulk body in OpenAPI (the handler decodes BulkFilesRequest).
type bulkFilesDoc struct {
	Files []FileRequest `json:"files" required:"true" minItems:"1" maxItems:"10000"`
}

// BulkFilesDoc is the documented shape of the bulk body.
func BulkFilesDoc() any { return bulkFilesDoc{} }

// PackageRequest is the body of POST /raw_data_package/.
type PackageRequest struct {
	ID                 *string  `json:"id,omitempty" format:"uuid"`
	ExecutedObsUnitID  *string  `json:"executed_obs_unit_id" required:"true" format:"uuid"`
	InstrumentModuleID *Int     `json:"instrument_module_id" required:"true"`
	Name               *string  `json:"name" required:"true" maxLength:"255"`
	FileIDs            []string `json:"file_ids,omitempty" doc:"Files that belong to the package (UUIDs); files may also name the package themselves."`
}

// FinalizeRequest is the body of PUT /raw_data_package/{id}/finalize.
type FinalizeRequest struct {
	SizeBytes *Int     `json:"size_bytes" required:"true" minimum:"0"`
	Checksum  *string  `json:"checksum" required:"true"`
	FileIDs   []string `json:"file_ids,omitempty"`
}

// FileUpdateRequest is the body of PUT /raw_data_files/{id} (any of the fields).
type FileUpdateRequest struct {
	SizeBytes        *Int            `json:"size_bytes,omitempty" minimum:"0"`
	Checksum         *string         `json:"checksum,omitempty"`
	RawDataPackageID *string         `json:"raw_data_package_id,omitempty" format:"uuid"`
	Meta             json.RawMessage `json:"meta,omitempty"`
}

// Start is a validated start of an executed obs unit.
type Start struct {
	ID                 string          `json:"id"`
	ObsUnitID          int64           `json:"obs_unit_id"`
	InstrumentModuleID int64           `json:"instrument_module_id,omitempty"`
	StartTime          time.Time       `json:"start_time"`
	Site               string          `json:"site"`
	Meta               json.RawMessage `json:"meta"`
}

// Finish is a validated finish of an executed obs unit.
type Finish struct {
	EndTime time.Time       `json:"end_time"`
	Status  string          `json:"status"`
	Meta    json.RawMessage `json:"meta"`
}

// File is a validated raw data file registration.
type File struct {
	ID                 string          `json:"id"`
	ExecutedObsUnitID  string          `json:"executed_obs_unit_id"`
	InstrumentModuleID int64           `json:"instrument_module_id"`
	Path               string          `json:"path"`
	SizeBytes          int64           `json:"size_bytes"`
	Checksum           string          `json:"checksum"`
	CreatedAt          *time.Time      `json:"created_at,omitempty"` // nil: when it was accepted
	RawDataPackageID   string          `json:"raw_data_package_id,omitempty"`
	Meta               json.RawMessage `json:"meta"`
}

// Package is a validated raw data package creation.
type Package struct {
	ID                 string   `json:"id"`
	ExecutedObsUnitID  string   `json:"executed_obs_unit_id"`
	InstrumentModuleID int64    `json:"instrument_module_id"`
	Name               string   `json:"name"`
	FileIDs            []string `json:"file_ids"`
}

// Finalize is a validated finalization of a package.
type Finalize struct {
	SizeBytes int64    `json:"size_bytes"`
	Checksum  string   `json:"checksum"`
	FileIDs   []string `json:"file_ids"`
}

// FileUpdate is a validated change of a registered file; nil fields stay as they are.
type FileUpdate struct {
	SizeBytes        *int64          `json:"size_bytes,omitempty"`
	Checksum         *string         `json:"checksum,omitempty"`
	RawDataPackageID *string         `json:"raw_data_package_id,omitempty"`
	Meta             json.RawMessage `json:"meta,omitempty"`
}

// Hash is the fingerprint of a validated record: equal records (a retry) have equal hashes, so a
// retry is told apart from a different record under the same id.
func Hash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("ingest: hash %T: %v", v, err)) // validated records always marshal
	}
	return HashJSON(b)
}

// HashJSON is Hash of a record already encoded with json.Marshal (a bulk write encodes each
// file once, for its fingerprint, its cache entry and its task alike).
func HashJSON(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// DecodeStart decodes and validates a start body; site is the default site name.
func DecodeStart(body []byte, site string) (Start, error) {
	var r StartRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return Start{}, ValidationError{*fe}
	}
	var e errs
	s := Start{Site: site}
	s.ID = checkUUID(&e, "body.id", r.ID, false)
	s.ObsUnitID = checkPositive(&e, "body.obs_unit_id", r.ObsUnitID, true, math.MaxInt64)
	s.InstrumentModuleID = checkPositive(&e, "body.instrument_module_id", r.InstrumentModuleID, false, maxInt32)
	if t := checkTime(&e, "body.start_time", r.StartTime, true); t != nil {
		s.StartTime = *t
	}
	if r.Site != nil {
		if *r.Site == "" || len(*r.Site) > MaxSiteLength {
			e.add("body.site", fmt.Sprintf("must be 1–%d characters", MaxSiteLength), *r.Site)
		} else if why := textStorable(*r.Site); why != "" {
			e.add("body.site", why, nil)
		}
		s.Site = *r.Site
	}
	s.Meta = checkMeta(&e, "body.meta", r.Meta)
	return s, e.err()
}

// DecodeFinish decodes and validates a finish body.
func DecodeFinish(body []byte) (Finish, error) {
	var r FinishRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return Finish{}, ValidationError{*fe}
	}
	var e errs
	f := Finish{Status: StatusCompleted}
	if t := checkTime(&e, "body.end_time", r.EndTime, true); t != nil {
		f.EndTime = *t
	}
	if r.Status != nil {
		switch *r.Status {
		case StatusCompleted, StatusFailed, StatusAborted:
			f.Status = *r.Status
		default:
			e.add("body.status", "must be one of completed, failed, aborted", *r.Status)
		}
	}
	f.Meta = checkMeta(&e, "body.meta", r.Meta)
	return f, e.err()
}

// DecodeFile decodes and validates one file registration (prefix "body", or "body.files[i]" in
// a bulk request).
func DecodeFile(body []byte, prefix string) (File, error) {
	var r FileRequest
	if fe := decodeStrict(body, &r, prefix); fe != nil {
		return File{}, ValidationError{*fe}
	}
	var e errs
	f := validateFile(&e, &r, prefix)
	return f, e.err()
}

func validateFile(e *errs, r *FileRequest, p string) File {
	var f File
	f.ID = checkUUID(e, p+".id", r.ID, false)
	f.ExecutedObsUnitID = checkUUID(e, p+".executed_obs_unit_id", r.ExecutedObsUnitID, true)
	f.InstrumentModuleID = checkPositive(e, p+".instrument_module_id", r.InstrumentModuleID, true, maxInt32)
	if r.Path == nil {
		e.add(p+".path", "required", nil)
	} else if why := ValidatePath(*r.Path); why != "" {
		e.add(p+".path", why, *r.Path)
	} else {
		f.Path = *r.Path
	}
	if n := checkSize(e, p+".size_bytes", r.SizeBytes, true); n != nil {
		f.SizeBytes = *n
	}
	f.Checksum = checkChecksum(e, p+".checksum", r.Checksum, true)
	f.CreatedAt = checkTime(e, p+".created_at", r.CreatedAt, false)
	f.RawDataPackageID = checkUUID(e, p+".raw_data_package_id", r.RawDataPackageID, false)
	f.Meta = checkMeta(e, p+".meta", r.Meta)
	return f
}

// DecodeBulkFiles decodes and validates a bulk registration: 1–MaxBulkFiles files, every one
// valid, no id twice. All errors are reported (each naming body.files[i].field), capped at 100.
func DecodeBulkFiles(body []byte) ([]File, error) {
	// The usual body decodes in one pass; only one that does not (a file of the wrong shape) is
	// decoded again file by file, to name the file its error is in.
	var whole struct {
		Files []FileRequest `json:"files"`
	}
	if decodeFast(body, &whole) && len(whole.Files) > 0 && len(whole.Files) <= MaxBulkFiles {
		return validateFiles(whole.Files, nil)
	}
	var r BulkFilesRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return nil, ValidationError{*fe}
	}
	var e errs
	switch {
	case r.Files == nil:
		e.add("body.files", "required", nil)
		return nil, e.err()
	case len(r.Files) == 0:
		e.add("body.files", "must hold at least one file", nil)
		return nil, e.err()
	case len(r.Files) > MaxBulkFiles:
		e.add("body.files", fmt.Sprintf("must hold at most %d files", MaxBulkFiles), len(r.Files))
		return nil, e.err()
	}
	reqs := make([]FileRequest, len(r.Files))
	undecoded := map[int]problem.FieldError{}
	for i, raw := range r.Files {
		if fe := decodeStrict(raw, &reqs[i], "body.files["+strconv.Itoa(i)+"]"); fe != nil {
			undecoded[i] = *fe
		}
	}
	return validateFiles(reqs, undecoded)
}

// modulePath is where a file is: its path on its instrument module's storage.
type modulePath struct {
	module int64
	path   string
}

// validateFiles validates decoded bulk files: every one valid, no id twice, no path twice on one
// instrument module (a path is the file's full path on the instrument's storage, so two files of
// one request cannot both be there); the files in undecoded report their decoding error instead.
// Errors name body.files[i].field, capped at 100.
func validateFiles(reqs []FileRequest, undecoded map[int]problem.FieldError) ([]File, error) {
	var e errs
	files := make([]File, len(reqs))
	seen := make(map[string]int, len(reqs))
	seenPath := make(map[modulePath]int, len(reqs))
	for i := range reqs {
		if len(e.list) >= 100 {
			break
		}
		if fe, bad := undecoded[i]; bad {
			e.list = append(e.list, fe)
			continue
		}
		p := "body.files[" + strconv.Itoa(i) + "]"
		files[i] = validateFile(&e, &reqs[i], p)
		if id := files[i].ID; id != "" {
			if j, dup := seen[id]; dup {
				e.add(p+".id", fmt.Sprintf("same id as body.files[%d]", j), id)
			}
			seen[id] = i
		}
		if f := files[i]; f.Path != "" {
			at := modulePath{f.InstrumentModuleID, f.Path}
			if j, dup := seenPath[at]; dup {
				e.add(p+".path", fmt.Sprintf("same path on the same instrument module as body.files[%d]", j), f.Path)
			} else {
				seenPath[at] = i
			}
		}
	}
	return files, e.err()
}

// DecodePackage decodes and validates a package creation.
func DecodePackage(body []byte) (Package, error) {
	var r PackageRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return Package{}, ValidationError{*fe}
	}
	var e errs
	var p Package
	p.ID = checkUUID(&e, "body.id", r.ID, false)
	p.ExecutedObsUnitID = checkUUID(&e, "body.executed_obs_unit_id", r.ExecutedObsUnitID, true)
	p.InstrumentModuleID = checkPositive(&e, "body.instrument_module_id", r.InstrumentModuleID, true, maxInt32)
	switch {
	case r.Name == nil:
		e.add("body.name", "required", nil)
	case *r.Name == "" || len(*r.Name) > MaxNameLength:
		e.add("body.name", fmt.Sprintf("must be 1–%d characters", MaxNameLength), *r.Name)
	case textStorable(*r.Name) != "":
		e.add("body.name", textStorable(*r.Name), nil)
	default:
		p.Name = *r.Name
	}
	p.FileIDs = checkIDList(&e, "body.file_ids", r.FileIDs, MaxPackageFiles)
	return p, e.err()
}

// DecodeFinalize decodes and validates a package finalization.
func DecodeFinalize(body []byte) (Finalize, error) {
	var r FinalizeRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return Finalize{}, ValidationError{*fe}
	}
	var e errs
	var f Finalize
	if n := checkSize(&e, "body.size_bytes", r.SizeBytes, true); n != nil {
		f.SizeBytes = *n
	}
	f.Checksum = checkChecksum(&e, "body.checksum", r.Checksum, true)
	f.FileIDs = checkIDList(&e, "body.file_ids", r.FileIDs, MaxPackageFiles)
	return f, e.err()
}

// DecodeFileUpdate decodes and validates a file update; at least one field must be given.
func DecodeFileUpdate(body []byte) (FileUpdate, error) {
	var r FileUpdateRequest
	if fe := decodeStrict(body, &r, "body"); fe != nil {
		return FileUpdate{}, ValidationError{*fe}
	}
	var e errs
	var u FileUpdate
	u.SizeBytes = checkSize(&e, "body.size_bytes", r.SizeBytes, false)
	if r.Checksum != nil {
		c := checkChecksum(&e, "body.checksum", r.Checksum, true)
		u.Checksum = &c
	}
	if r.RawDataPackageID != nil {
		id := checkUUID(&e, "body.raw_data_package_id", r.RawDataPackageID, true)
		u.RawDataPackageID = &id
	}
	if len(r.Meta) > 0 && string(r.Meta) != "null" {
		u.Meta = checkMeta(&e, "body.meta", r.Meta)
	}
	if r.SizeBytes == nil && r.Checksum == nil && r.RawDataPackageID == nil && u.Meta == nil && len(e.list) == 0 {
		e.add("body", "give at least one of size_bytes, checksum, raw_data_package_id, meta", nil)
	}
	return u, e.err()
}
