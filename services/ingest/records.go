package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	segjson "github.com/segmentio/encoding/json"
)

// Where a record read through the smart query comes from (docs/architecture.md, the buffer).
const (
	Buffered   = "buffered"   // held in the Redis buffer, not yet in the database
	Committed  = "committed"  // a row in the (main) database
	Replicated = "replicated" // a row in this site's read replica (secondary sites)
	Dead       = "dead"       // held in the buffer, its write a dead letter (TxState.Dead)
)

// TxState is where a buffered write's transaction is, as the reads show it (Buffer.TxStates):
// committed, dead (a dead letter, or its task gone without a commit) with the error, or neither
// (buffered: waiting for, or being applied by, the worker).
type TxState struct {
	Committed bool
	Dead      bool
	LastError string
}

// ExecutedObsUnit is one execution of a planned obs unit, as read.
type ExecutedObsUnit struct {
	ID                 string          `json:"id" format:"uuid"`
	ObsUnitID          *int64          `json:"obs_unit_id" doc:"Null only while a finish has been applied before its start."`
	InstrumentModuleID *int64          `json:"instrument_module_id,omitempty"`
	Site               string          `json:"site,omitempty"`
	Status             string          `json:"status" enum:"running,completed,failed,aborted"`
	StartTime          *time.Time      `json:"start_time"`
	EndTime            *time.Time      `json:"end_time,omitempty"`
	Meta               json.RawMessage `json:"meta"`
	// Inconsistent is why the execution's stored start and finish contradict each other (both
	// acknowledged, by two sites; see postgres.Applier.ApplyStart), absent when they do not.
	Inconsistent *string `json:"inconsistent,omitempty" doc:"Present only when the start and the finish, acknowledged separately (two sites), contradict each other (end before start): why. Both are kept; an operator decides."`
	BufferStatus string  `json:"buffer_status" enum:"buffered,committed,replicated,dead" doc:"Where the record was read from: buffered (held in the buffer, not in the main database yet), committed (in the main database; at a secondary site served from the buffer until this site's replica has it), replicated (read from this site's replica), dead (held in the buffer, but its write is a dead letter: it will not be applied unless an operator retries it; last_error says why). A record made of several writes (an execution's start and finish) reads as its least advanced one, dead before buffered."`
	LastError    *string `json:"last_error" doc:"Why the record's write is a dead letter (buffer_status dead), as its receipt says; null otherwise."`
}

// RawDataFile is a registered raw data file, as read.
type RawDataFile struct {
	ID                 string          `json:"id" format:"uuid"`
	ExecutedObsUnitID  string          `json:"executed_obs_unit_id" format:"uuid"`
	InstrumentModuleID int64           `json:"instrument_module_id"`
	Path               string          `json:"path"`
	SizeBytes          int64           `json:"size_bytes"`
	Checksum           string          `json:"checksum"`
	CreatedAt          time.Time       `json:"created_at"`
	RawDataPackageID   *string         `json:"raw_data_package_id"`
	Meta               json.RawMessage `json:"meta"`
	BufferStatus       string          `json:"buffer_status" enum:"buffered,committed,replicated,dead" doc:"Where the record was read from: buffered (held in the buffer, not in the main database yet), committed (in the main database; at a secondary site served from the buffer until this site's replica has it), replicated (read from this site's replica), dead (held in the buffer, but its write is a dead letter: it will not be applied unless an operator retries it; last_error says why). A record made of several writes (an execution's start and finish) reads as its least advanced one, dead before buffered."`
	LastError          *string         `json:"last_error" doc:"Why the record's write is a dead letter (buffer_status dead), as its receipt says; null otherwise."`
}

// RawDataPackage is a raw data package, as read (its files are listed beside it).
type RawDataPackage struct {
	ID                 string     `json:"id" format:"uuid"`
	ExecutedObsUnitID  string     `json:"executed_obs_unit_id" format:"uuid"`
	InstrumentModuleID int64      `json:"instrument_module_id"`
	Name               string     `json:"name"`
	Status             string     `json:"status" enum:"building,complete"`
	SizeBytes          *int64     `json:"size_bytes"`
	Checksum           *string    `json:"checksum"`
	FinalizedAt        *time.Time `json:"finalized_at"`
	CreatedAt          time.Time  `json:"created_at"`
	BufferStatus       string     `json:"buffer_status" enum:"buffered,committed,replicated,dead" doc:"Where the record was read from: buffered (held in the buffer, not in the main database yet), committed (in the main database; at a secondary site served from the buffer until this site's replica has it), replicated (read from this site's replica), dead (held in the buffer, but its write is a dead letter: it will not be applied unless an operator retries it; last_error says why). A record made of several writes (an execution's start and finish) reads as its least advanced one, dead before buffered."`
	LastError          *string    `json:"last_error" doc:"Why the record's write is a dead letter (buffer_status dead), as its receipt says; null otherwise."`
}

// Record is how a validated file reads while it is buffered (accepted at at).
func (f File) Record(at time.Time) RawDataFile {
	r := RawDataFile{
		ID: f.ID, ExecutedObsUnitID: f.ExecutedObsUnitID, InstrumentModuleID: f.InstrumentModuleID,
		Path: f.Path, SizeBytes: f.SizeBytes, Checksum: f.Checksum, CreatedAt: at, Meta: f.Meta,
		BufferStatus: Buffered,
	}
	if f.CreatedAt != nil {
		r.CreatedAt = *f.CreatedAt
	}
	if f.RawDataPackageID != "" {
		id := f.RawDataPackageID
		r.RawDataPackageID = &id
	}
	return r
}

// Task types on the ingest queue.
const (
	TaskStart   = "ingest:start"   // StartTask
	TaskFinish  = "ingest:finish"  // FinishTask
	TaskFiles   = "ingest:files"   // FilesTask (single and bulk registrations)
	TaskPackage = "ingest:package" // PackageTask
	// TaskWrites carries several small writes that reached one API process at about the same
	// time (WritesTask): held in one Redis round trip and applied by one task, so a stream of
	// single-file registrations costs the buffer and the worker one task per round instead of
	// one per request.
	TaskWrites = "ingest:writes"
)

// Envelope is what every task carries besides its record: the transaction it belongs to and when
// the API accepted it (for time-to-durable and default timestamps).
type Envelope struct {
	TxID       string    `json:"tx"`
	AcceptedAt time.Time `json:"at"`
}

// StartTask applies a start.
type StartTask struct {
	Envelope
	Start Start `json:"start"`
}

// FinishTask applies a finish of executed obs unit ID.
type FinishTask struct {
	Envelope
	ID     string `json:"id"`
	Finish Finish `json:"finish"`
}

// FilesTask registers files (one, or a whole bulk request in batches).
type FilesTask struct {
	Envelope
	Files []File `json:"files"`
}

// EncodeFilesTask is json.Marshal(FilesTask{env, files}) for files already encoded one by one
// with json.Marshal: a bulk write encodes each file once and reuses it here.
func EncodeFilesTask(env Envelope, files []json.RawMessage) ([]byte, error) {
	head, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	n := len(head) + 12
	for _, f := range files {
		n += len(f) + 1
	}
	b := append(make([]byte, 0, n), head[:len(head)-1]...) // without its closing brace
	b = append(b, `,"files":[`...)
	for i, f := range files {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, f...)
	}
	return append(b, "]}"...), nil
}

// DecodeTask decodes the payload of a task the API enqueued (a StartTask, FilesTask, …, or a
// WritesTask) into v, with segmentio's encoding/json: the worker's payloads are encoding/json's
// own output, which it decodes to the same values about 5× faster (a 1,000-file task: 0.44
// instead of 2.3 ms, half the worker's CPU per file; TestDecodeTaskAgrees).
func DecodeTask(payload []byte, v any) error { return segjson.Unmarshal(payload, v) }

// PackageTask creates a package.
type PackageTask struct {
	Envelope
	Package Package `json:"package"`
}

// WritesTask is the payload of a TaskWrites task: each write as the task it would have been on
// its own (type and payload, its own transaction inside), in the order they were held.
type WritesTask struct {
	Writes []SubWrite `json:"writes"`
}

// SubWrite is one write of a WritesTask.
type SubWrite struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// Task ids are derived from the record ids, so the same record enqueued twice is one task while
// the first is still held (asynq refuses a second task with a live id).
func StartTaskID(id string) string   { return "start:" + id }
func FinishTaskID(id string) string  { return "finish:" + id }
func PackageTaskID(id string) string { return "package:" + id }

// WritesTaskID is a new id for a TaskWrites task ("writes:<uuid>"): its writes are recognised
// by their records' ids, not by the task's.
func WritesTaskID() string { return "writes:" + NewID() }

// FilesTaskID is "file:<id>" for one file, "files:<digest of the ids>" for a bulk request.
func FilesTaskID(files []File) string {
	if len(files) == 1 {
		return "file:" + files[0].ID
	}
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.ID))
	}
	return "files:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Receipt states: where a buffered write is on its way to the main database (docs/api.md).
const (
	TxBuffered   = "buffered"
	TxApplying   = "applying"
	TxCommitted  = "committed"
	TxReplicated = "replicated"
	TxRetrying   = "retrying"
	TxDead       = "dead"
)

// Receipt says where a buffered write is.
type Receipt struct {
	TransactionID string     `json:"transaction_id" format:"uuid"`
	State         string     `json:"state" enum:"buffered,applying,committed,replicated,retrying,dead"`
	Attempts      int        `json:"attempts" doc:"Times a worker has tried to apply it (failed attempts while the database was unreachable included)."`
	LastError     *string    `json:"last_error" doc:"Why the last attempt failed, or why the write is dead; null when nothing failed."`
	CommittedAt   *time.Time `json:"committed_at" doc:"When the worker committed it; null until then."`
	CommitLSN     *string    `json:"commit_lsn" doc:"WAL position of the commit in the main database; null until committed."`
	Kind          string     `json:"kind" doc:"start, finish, files, package"`
	RecordIDs     []string   `json:"record_ids" doc:"The records it writes (at most 100 listed; [] when the receipt no longer knows them)."`
}

// Optional is s, or nil when s is empty: a receipt field that is null when there is nothing to say.
func Optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// KindOf names a task type's kind for receipts ("ingest:files" → "files").
func KindOf(taskType string) string { return strings.TrimPrefix(taskType, "ingest:") }
