package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Buffer is what the use cases need of the Redis buffer (services/ingest/buffer implements it):
// holding a write (its read-cache entries and its task) in one round trip, reading the read cache,
// Idempotency-Key answers and receipts.
type Buffer interface {
	// Hold caches the write's records and enqueues its task; ErrBufferUnavailable or a
	// *BufferConflictError when it cannot.
	Hold(ctx context.Context, w Write) (HoldResult, error)
	// Get reads cached records of one kind by id; missing ones are absent from the map.
	Get(ctx context.Context, kind string, ids ...string) (map[string]Cached, error)
	// ClaimOwners returns the owner of each of the claim keys held by a buffered record (see
	// Claim); keys nobody holds are absent.
	ClaimOwners(ctx context.Context, keys ...string) (map[string]string, error)
	// Exists reports which of the ids are cached as kind.
	Exists(ctx context.Context, kind string, ids ...string) (map[string]bool, error)
	// Members lists an index set (OUIndex, PackageIndex).
	Members(ctx context.Context, index string) ([]string, error)
	// OUIndex names the index of the buffered executions of an obs unit.
	OUIndex(obsUnitID int64) string
	// PackageIndex names the index of the buffered files naming a package.
	PackageIndex(id string) string
	// OUFence names the fence key of an obs unit (fences.go), which a start lists in Write.Fences.
	OUFence(obsUnitID int64) string
	// FenceObsUnits fences obs units for a delete (token) and returns their buffered executions
	// by obs unit, in one step.
	FenceObsUnits(ctx context.Context, token string, ids []int64) (map[int64][]string, error)
	// SealObsUnits turns a delete's fences into tombstones (ErrFenceLost: none changed).
	SealObsUnits(ctx context.Context, token string, ids []int64) error
	// ReleaseObsUnits removes a delete's own fences and tombstones.
	ReleaseObsUnits(ctx context.Context, token string, ids []int64) error
	// CommittedTxs reports which transactions have committed in the main database.
	CommittedTxs(ctx context.Context, txs ...string) (map[string]bool, error)
	// TxStates reports which transactions have committed and which are dead, with the error
	// (transactions in neither state are absent).
	TxStates(ctx context.Context, txs ...string) (map[string]TxState, error)
	// Receipt tells where a transaction is (ErrNoTransaction when unknown).
	Receipt(ctx context.Context, tx string) (Receipt, error)
	// LearnCommitted makes every API's committed filter learn the unique keys of items (a
	// direct write, before it applies).
	LearnCommitted(ctx context.Context, items []Item) error
	// RecordDirect records the receipt of a write applied without buffering (best effort).
	RecordDirect(ctx context.Context, w Write, lsn string, committedAt time.Time)
	// BeginIdempotent claims an Idempotency-Key: the stored entry when it was used before, or
	// nil when this request now owns it (then FinishIdempotent or AbortIdempotent).
	BeginIdempotent(ctx context.Context, user int64, keyDigest, hash string) (*IdemEntry, error)
	// FinishIdempotent stores the answer of the request owning the key, for ttl.
	FinishIdempotent(ctx context.Context, user int64, keyDigest string, e IdemEntry, ttl time.Duration) error
	// AbortIdempotent frees the key of a request that did not succeed.
	AbortIdempotent(ctx context.Context, user int64, keyDigest string)
}

// Kinds of cached records.
const (
	KindStart   = "start"
	KindFinish  = "finish"
	KindFile    = "file"
	KindPackage = "package"
)

// Item is one record of a write: its cache key parts, fingerprint, value and optional index.
type Item struct {
	Kind   string
	ID     string
	Hash   string
	Record any    // cached as JSON; a json.RawMessage is taken as already encoded
	Index  string // "" or an index set key (see Buffer.OUIndex, Buffer.PackageIndex)
	// Claims are what the record reserves while it is buffered (see Claim); released with it.
	Claims []Claim
	// Unique are the keys the record takes once committed (a file's path on its module, its
	// id): the buffer's committed filter (a Bloom filter of every committed file's path and
	// id, docs/decisions.md §49) is asked whether one may be taken already before the write is
	// held (see Write.Checked), and learns them when the worker commits the record.
	Unique []string
}

// FileUnique are the keys of a file for the committed filter: its path on its module, and its
// id when the filter may hold it (IDInFilter: not a version 7 UUID, the kind the API assigns).
func FileUnique(f File) []string {
	if IDInFilter(f.ID) {
		return []string{UniquePath(f.InstrumentModuleID, f.Path), UniqueFileID(f.ID)}
	}
	return []string{UniquePath(f.InstrumentModuleID, f.Path)}
}

// IDInFilter reports whether the committed filter holds a file id: not for a version 7 UUID, the
// kind the API assigns (NewID), so that the ids of registrations without one — nearly all — cost
// the filter nothing. A client naming a version 7 id is checked in the database instead
// (holdFiles), which also finds an id the API assigned.
func IDInFilter(id string) bool { return len(id) != 36 || id[14] != '7' }

// UniquePath is the committed filter's key of a path on an instrument module.
func UniquePath(module int64, path string) string {
	return "p:" + strconv.FormatInt(module, 10) + ":" + path
}

// UniqueFileID is the committed filter's key of a file id.
func UniqueFileID(id string) string { return "i:" + id }

// FileKey is what the committed filter knows of a committed file: its id, and its path on its
// instrument module.
type FileKey struct {
	ID                 string `db:"id"`
	InstrumentModuleID int64  `db:"instrument_module_id"`
	Path               string `db:"path"`
}

// ErrUnchecked is Buffer.Hold's answer for a write whose unique keys the committed filter cannot
// rule out (some committed record may hold one: a replay, a real conflict, or the filter's rare
// false positive — or the filter is being built): nothing was held; check the database and hold
// the write again with Checked set.
var ErrUnchecked = errors.New("the committed filter cannot rule out a committed record: check the database")

// Claim reserves, for a record while it is buffered, something only one record may hold: a
// path on an instrument module (owner: the file), a file's membership of a package (owner: the
// package) or a package name in an execution (owner: the package). Buffer.Hold checks and takes
// a write's claims in the same script that holds its records, so of two concurrent writes
// claiming one key with different owners exactly one is held and the other is refused at once
// (*ClaimConflictError → 409), however close together they arrive; committed rows are checked in
// the database before holding (references.go), and the database's unique keys hold the same
// rules (migration 00018). A claim is released when its record leaves the buffer (committed, or
// dropped from the dead letters).
type Claim struct {
	Key   string
	Owner string
}

// Claim keys.
const (
	ClaimPath   = "path:"   // + module + ":" + path → file id
	ClaimMember = "member:" // + file id → package id
	ClaimName   = "name:"   // + executed obs unit id + ":" + name → package id
	// ClaimFinish + executed obs unit id → the finish's content hash: one finish per execution,
	// also while the first is being committed and leaving the cache (its record alone would not
	// say so then: the check of the committed finish may have run just before that commit).
	ClaimFinish = "finish:"
)

// FileClaims are the claims of a file's registration: its path, and its package if it names one.
func FileClaims(f File) []Claim {
	c := []Claim{{Key: ClaimPath + strconv.FormatInt(f.InstrumentModuleID, 10) + ":" + f.Path, Owner: f.ID}}
	if f.RawDataPackageID != "" {
		c = append(c, Claim{Key: ClaimMember + f.ID, Owner: f.RawDataPackageID})
	}
	return c
}

// PackageClaims are the claims of a package's creation: its name in its execution and its files.
func PackageClaims(p Package) []Claim {
	c := make([]Claim, 0, 1+len(p.FileIDs))
	c = append(c, Claim{Key: ClaimName + p.ExecutedObsUnitID + ":" + p.Name, Owner: p.ID})
	for _, f := range p.FileIDs {
		c = append(c, Claim{Key: ClaimMember + f, Owner: p.ID})
	}
	return c
}

// ClaimConflictError is a write refused because another buffered record holds some of its claims:
// per conflicting claim, the record (Items index) that asked for it and the owner holding it.
type ClaimConflictError struct {
	Conflicts []ClaimConflict
}

// ClaimConflict is one claim held by another owner.
type ClaimConflict struct {
	Item  int
	Claim Claim
	Owner string // who holds it
}

func (e *ClaimConflictError) Error() string {
	c := e.Conflicts[0]
	return "claim " + c.Claim.Key + " is held by " + c.Owner
}

// Write is one buffered write: its records and the task that applies them.
type Write struct {
	Tx       string
	Items    []Item
	TaskType string
	TaskID   string
	Payload  func(tx string) ([]byte, error) // built with the transaction that ends up owning it
	// Fences are keys that must not exist for the write to be held (a start lists its obs
	// unit's fence, Buffer.OUFence): Hold answers *FencedError if one does.
	Fences []string
	// Checked says the items' unique keys were checked against the committed rows already:
	// the committed filter is not asked (else Hold may answer ErrUnchecked).
	Checked bool
}

// HoldResult is how a write was held.
type HoldResult struct {
	Tx       string // the transaction: new, or the original one of an identical earlier write
	Replayed bool   // every record was already held, identical: the original transaction answers
}

// Cached is a record read from the cache.
type Cached struct {
	Tx     string
	Hash   string
	Record json.RawMessage
}

// CacheRecord is how a record sits in the read cache: with the time it was accepted.
type CacheRecord[T any] struct {
	At time.Time `json:"at"`
	R  T         `json:"r"`
}

// IdemEntry is the stored answer of a request made with an Idempotency-Key.
type IdemEntry struct {
	Hash     string          `json:"hash"` // of method, path and body
	Done     bool            `json:"done"` // false while the first request is in progress
	Status   int             `json:"status,omitempty"`
	Location string          `json:"location,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
}

// ErrBufferUnavailable wraps every failure to reach Redis: the write is answered 503 with
// Retry-After.
var ErrBufferUnavailable = errors.New("the buffer (Redis) cannot take the write")

// BufferConflictError says a different record is already held under an id (409).
type BufferConflictError struct {
	Index int // which record of the request (bulk: files[Index])
	ID    string
}

func (e *BufferConflictError) Error() string {
	return "a different record with id " + e.ID + " is already buffered"
}

// ErrNoTransaction is the receipt of a transaction the buffer does not know (404).
var ErrNoTransaction error = &notFoundError{"no such transaction (unknown, or older than 7 days)"}
