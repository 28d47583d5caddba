// Package buffer is the Redis side of ingest: the read cache of buffered records, the asynq
// queue the worker drains, Idempotency-Key answers and transaction receipts.
//
// A buffered write is held once both its cache entries and its task are in Redis; only then does
// the API answer 201. Both are written by one Lua script in one round trip (holdScript), so a
// write is held entirely or not at all: the script refuses a different record under an id
// already held, caches the records and enqueues the task (with a TaskID derived from the record
// ids) exactly as asynq's own client would. The worker removes entries only after their rows are
// committed, and a read consults the cache before the database, so a read never misses a write
// it was told is held.
package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/ingest"
)

// Redis keys (all under "ingest:").
const (
	recPrefix      = "ingest:rec:"      // + kind + ":" + id → "<hash>|<tx>|<record json>"
	ouIndexPrefix  = "ingest:ou:"       // + obs unit id → set of buffered executed obs unit ids
	pkgIndexPrefix = "ingest:pkgfiles:" // + package id → set of buffered file ids naming it
	txPrefix       = "ingest:tx:"       // + tx → JSON txInfo
	txStatePrefix  = "ingest:txstate:"  // + tx → hash: attempts, last_error, committed_at, lsn
	idemPrefix     = "ingest:idem:"     // + user id + ":" + key digest → JSON idemEntry
)

// Kinds of cached records.
const (
	KindStart   = "start"
	KindFinish  = "finish"
	KindFile    = "file"
	KindPackage = "package"
)

// How long entries live. Records stay until committed; the TTL only bounds garbage left by a
// crash between caching and enqueueing (a write that was never acknowledged).
const (
	recordTTL = 30 * 24 * time.Hour
	txTTL     = 7 * 24 * time.Hour
	// inProgressTTL bounds how long an Idempotency-Key stays locked by a request that died.
	inProgressTTL = 30 * time.Second
	hashLen       = 32
)

// ErrUnavailable wraps every failure to reach Redis: the API answers 503 with Retry-After.
var ErrUnavailable = errors.New("the buffer (Redis) cannot take the write")

// ConflictError says a different record is already held under an id (409).
type ConflictError struct {
	Index int // which record of the request (bulk: files[Index])
	ID    string
}

func (e *ConflictError) Error() string {
	return "a different record with id " + e.ID + " is already buffered"
}

// Buffer is the Redis side of ingest.
type Buffer struct {
	rdb     redis.UniversalClient
	client  *asynq.Client
	insp    *asynq.Inspector
	timeout time.Duration
	hold    *redis.Script
}

// New returns the buffer on rdb; timeout bounds each Redis round trip of a write.
func New(rdb redis.UniversalClient, timeout time.Duration) *Buffer {
	return &Buffer{
		rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		timeout: timeout, hold: redis.NewScript(holdScript),
	}
}

// Item is one record of a write: its cache key parts, fingerprint, value and optional index.
type Item struct {
	Kind   string
	ID     string
	Hash   string
	Record any    // cached as JSON; a json.RawMessage is taken as already encoded
	Index  string // "" or an index set key (see OUIndex, PackageIndex)
}

// OUIndex is the index of buffered executions of obs unit id.
func OUIndex(obsUnitID int64) string { return ouIndexPrefix + strconv.FormatInt(obsUnitID, 10) }

// PackageIndex is the index of buffered files naming package id.
func PackageIndex(id string) string { return pkgIndexPrefix + id }

func recKey(kind, id string) string { return recPrefix + kind + ":" + id }

// Write is one buffered write: its records and the task that applies them.
type Write struct {
	Tx       string
	Items    []Item
	TaskType string
	TaskID   string
	Payload  func(tx string) ([]byte, error) // built with the transaction that ends up owning it
}

// Result is how a write was held.
type Result struct {
	Tx       string // the transaction: new, or the original one of an identical earlier write
	Replayed bool   // every record was already held, identical: the original transaction answers
}

// holdScript holds one write: it caches the records unless a different record is held under
// one of their ids, and enqueues the task the way asynq's client does (asynq v0.26's enqueue
// script: the task hash with its encoded message, state pending and pending_since, its id pushed
// on the queue's pending list, the queue in the set of queues; see taskMessage). KEYS: tx key,
// task key, pending list, set of queues, then one record key per item. ARGV: record TTL ms, tx
// TTL ms, tx info, tx id, encoded task message, task id, now (unix ns), queue name, then per
// item: hash, value, index key (or ""), member. The records are first asked for in one EXISTS
// per 1,000 keys, and read one by one only when one is held (a retry or a conflict): a new bulk
// write of 1,000 files costs one call instead of 1,000 GETs. Replies {"new"}, {"replay", tx}
// (every record already held, identical: the original transaction, whose task is held),
// {"unqueued", tx} (the same, but the original task is gone: the caller enqueues it again with
// that transaction) or {"conflict", i} (1-based item).
const holdScript = `
local n = #KEYS - 4
local held, first = 0, nil
local any = false
for c = 5, n + 4, 1000 do
  if redis.call('EXISTS', unpack(KEYS, c, math.min(c + 999, n + 4))) > 0 then any = true break end
end
for i = 1, any and n or 0 do
  local v = redis.call('GET', KEYS[i + 4])
  if v then
    local e = ARGV[8 + (i - 1) * 3 + 1]
    local h = string.sub(e, 1, string.find(e, '|', 1, true))
    if string.sub(v, 1, #h) ~= h then return {'conflict', tostring(i)} end
    held = held + 1
    if not first then first = string.sub(v, #h + 1, #h + 36) end
  end
end
if n > 0 and held == n then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {'replay', first} end
  return {'unqueued', first}
end
for i = 1, n do
  local o = 8 + (i - 1) * 3
  local ok = redis.call('SET', KEYS[i + 4], ARGV[o + 1], 'NX', 'PX', ARGV[1])
  if ok and ARGV[o + 2] ~= '' then redis.call('SADD', ARGV[o + 2], ARGV[o + 3]) end
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'msg', ARGV[5], 'state', 'pending', 'pending_since', ARGV[7])
  redis.call('LPUSH', KEYS[3], ARGV[6])
  redis.call('SADD', KEYS[4], ARGV[8])
end
return {'new', ''}
`

// asynq's Redis layout (v0.26, internal/base): the keys holdScript writes a task under.
func asynqTaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }
func asynqPendingKey(queue string) string  { return "asynq:{" + queue + "}:pending" }

const asynqQueuesKey = "asynq:queues"

// taskMessage encodes a task as asynq v0.26 stores it (internal/proto TaskMessage, protobuf):
// type (1), payload (2), id (3), queue (4), retry (5) and timeout in seconds (8); every other
// field is at its zero value (no deadline, no uniqueness, no group, no retention), as asynq's
// client leaves it for these options. TestHoldEnqueuesLikeAsynq reads it back with asynq's
// inspector and has its server process it, so an asynq upgrade that changes the layout fails
// there.
func taskMessage(typ string, payload []byte, id, queue string, retry int, timeout time.Duration) []byte {
	b := make([]byte, 0, len(payload)+len(typ)+len(id)+len(queue)+32)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, typ)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, payload)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, queue)
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(retry))
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(timeout/time.Second))
	return b
}

// txInfo is what a receipt starts from.
type txInfo struct {
	TaskID string    `json:"task"`
	Kind   string    `json:"kind"`
	IDs    []string  `json:"ids,omitempty"`
	At     time.Time `json:"at"`
}

// Hold caches the write's records and enqueues its task, in one round trip (holdScript). It
// returns only once Redis has taken both (appendfsync everysec: the write has reached the
// kernel), or an error: ErrUnavailable (nothing is held, answer 503) or *ConflictError.
func (b *Buffer) Hold(ctx context.Context, w Write) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	ids := make([]string, 0, min(len(w.Items), 100))
	for _, it := range w.Items[:min(len(w.Items), 100)] {
		ids = append(ids, it.ID)
	}
	info, _ := json.Marshal(txInfo{TaskID: w.TaskID, Kind: ingest.KindOf(w.TaskType), IDs: ids, At: time.Now().UTC()})
	payload, err := w.Payload(w.Tx)
	if err != nil {
		return Result{}, fmt.Errorf("encode task: %w", err)
	}
	keys := make([]string, 4, len(w.Items)+4)
	keys[0], keys[1], keys[2], keys[3] = txPrefix+w.Tx, asynqTaskKey(ingest.Queue, w.TaskID), asynqPendingKey(ingest.Queue), asynqQueuesKey
	args := make([]any, 0, 8+4*len(w.Items))
	args = append(args, recordTTL.Milliseconds(), txTTL.Milliseconds(), info, w.Tx,
		taskMessage(w.TaskType, payload, w.TaskID, ingest.Queue, MaxRetry, TaskTimeout), w.TaskID, time.Now().UnixNano(), ingest.Queue)
	for _, it := range w.Items {
		var v []byte // go-redis sends []byte as it is, but not a json.RawMessage
		if raw, encoded := it.Record.(json.RawMessage); encoded {
			v = raw
		} else if v, err = json.Marshal(it.Record); err != nil {
			return Result{}, fmt.Errorf("encode record: %w", err)
		}
		keys = append(keys, recKey(it.Kind, it.ID))
		member := ""
		if it.Index != "" {
			member = it.ID
		}
		entry := make([]byte, 0, len(it.Hash)+len(w.Tx)+len(v)+2) // as parseCached reads it
		entry = append(append(append(append(append(entry, it.Hash...), '|'), w.Tx...), '|'), v...)
		args = append(args, entry, it.Index, member)
	}
	res, err := b.hold.Run(ctx, b.rdb, keys, args...).StringSlice()
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	switch res[0] {
	case "conflict":
		i, _ := strconv.Atoi(res[1])
		return Result{}, &ConflictError{Index: i - 1, ID: w.Items[i-1].ID}
	case "replay":
		return Result{Tx: res[1], Replayed: true}, nil
	case "unqueued":
		// Every record is held already but the original task is gone (deleted by hand while
		// its records stayed cached): enqueue it again, with the original transaction.
		if payload, err = w.Payload(res[1]); err != nil {
			return Result{}, fmt.Errorf("encode task: %w", err)
		}
		_, err = b.client.EnqueueContext(ctx, asynq.NewTask(w.TaskType, payload), asynq.Queue(ingest.Queue), asynq.TaskID(w.TaskID),
			asynq.MaxRetry(MaxRetry), asynq.Timeout(TaskTimeout))
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return Result{Tx: res[1], Replayed: true}, nil
	}
	return Result{Tx: w.Tx}, nil
}

// MaxRetry is how often a task whose failure is neither an outage nor known to be permanent is
// retried before it becomes a dead letter. Outages never count (see worker.IsFailure).
const MaxRetry = 25

// TaskTimeout bounds one attempt to apply a task (a hung database connection is given up and
// the task retried).
const TaskTimeout = time.Minute

// Cached is a record read from the cache.
type Cached struct {
	Tx     string
	Hash   string
	Record json.RawMessage
}

func parseCached(v string) (Cached, bool) {
	if len(v) < hashLen+38 || v[hashLen] != '|' || v[hashLen+37] != '|' {
		return Cached{}, false
	}
	return Cached{Hash: v[:hashLen], Tx: v[hashLen+1 : hashLen+37], Record: json.RawMessage(v[hashLen+38:])}, true
}

// Get reads cached records of one kind by id; missing ones are absent from the map.
func (b *Buffer) Get(ctx context.Context, kind string, ids ...string) (map[string]Cached, error) {
	out := make(map[string]Cached, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = recKey(kind, id)
	}
	for start := 0; start < len(keys); start += 1000 {
		end := min(start+1000, len(keys))
		vals, err := b.rdb.MGet(ctx, keys[start:end]...).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				if c, ok := parseCached(s); ok {
					out[ids[start+i]] = c
				}
			}
		}
	}
	return out, nil
}

// Members lists an index set (OUIndex, PackageIndex).
func (b *Buffer) Members(ctx context.Context, index string) ([]string, error) {
	m, err := b.rdb.SMembers(ctx, index).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return m, nil
}

// Exists reports which of the ids are held in the cache as kind: one pipelined EXISTS per id,
// so checking the up to 10,000 files of a package moves no record over the wire.
func (b *Buffer) Exists(ctx context.Context, kind string, ids ...string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := b.rdb.Pipeline()
	found := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		found[i] = pipe.Exists(ctx, recKey(kind, id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for i, f := range found {
		if f.Val() == 1 {
			out[ids[i]] = true
		}
	}
	return out, nil
}

// Evict removes committed records from the cache and records the commit in the transaction's
// receipt; called by the worker after its transaction committed.
func (b *Buffer) Evict(ctx context.Context, tx string, items []Item, lsn string, committedAt time.Time) error {
	pipe := b.rdb.Pipeline()
	queueRemoval(ctx, pipe, items)
	queueCommit(ctx, pipe, tx, lsn, committedAt)
	_, err := pipe.Exec(ctx)
	return err
}

// queueCommit adds to pipe the bookkeeping of a commit of tx: its receipt (commit time, WAL
// position, one more attempt) and the time of the last commit for /buffer-stats.
func queueCommit(ctx context.Context, pipe redis.Pipeliner, tx, lsn string, committedAt time.Time) {
	st := txStatePrefix + tx
	pipe.HSet(ctx, st, "committed_at", committedAt.UTC().Format(time.RFC3339Nano), "lsn", lsn)
	pipe.HIncrBy(ctx, st, "attempts", 1)
	pipe.PExpire(ctx, st, txTTL)
	pipe.Set(ctx, contract.IngestLastApplyKey, strconv.FormatInt(committedAt.UnixMilli(), 10), 0)
}

// RecordFailure notes a failed attempt in the transaction's receipt.
func (b *Buffer) RecordFailure(ctx context.Context, tx string, err error) {
	st := txStatePrefix + tx
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	pipe := b.rdb.Pipeline()
	pipe.HIncrBy(ctx, st, "attempts", 1)
	pipe.HSet(ctx, st, "last_error", msg)
	pipe.PExpire(ctx, st, txTTL)
	_, _ = pipe.Exec(ctx)
}

// ErrNoTransaction is answered 404 by the receipts route.
var ErrNoTransaction = errors.New("no such transaction (unknown, or older than 7 days)")

// Receipt tells where a buffered transaction is: committed once the worker recorded its commit,
// else the state of its task in the queue.
func (b *Buffer) Receipt(ctx context.Context, tx string) (ingest.Receipt, error) {
	pipe := b.rdb.Pipeline()
	infoCmd := pipe.Get(ctx, txPrefix+tx)
	stCmd := pipe.HGetAll(ctx, txStatePrefix+tx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	st := stCmd.Val()
	r := ingest.Receipt{TransactionID: tx, State: ingest.TxBuffered, LastError: st["last_error"]}
	r.Attempts, _ = strconv.Atoi(st["attempts"])
	var info txInfo
	if s, err := infoCmd.Result(); err == nil {
		_ = json.Unmarshal([]byte(s), &info)
		r.Kind, r.RecordIDs = info.Kind, info.IDs
	} else if len(st) == 0 {
		return ingest.Receipt{}, ErrNoTransaction
	}
	if at, ok := st["committed_at"]; ok {
		t, _ := time.Parse(time.RFC3339Nano, at)
		r.State, r.CommittedAt, r.CommitLSN = ingest.TxCommitted, &t, st["lsn"]
		if _, ok := st["replicated_at"]; ok {
			r.State = ingest.TxReplicated // secondary site: this site's replica has the commit
		}
		return r, nil
	}
	ti, err := b.insp.GetTaskInfo(ingest.Queue, info.TaskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		r.State = ingest.TxDead
		if r.LastError == "" {
			r.LastError = "the task is no longer buffered and its commit was not recorded"
		}
		return r, nil
	case err != nil:
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	switch ti.State {
	case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateAggregating:
		r.State = ingest.TxBuffered
	case asynq.TaskStateActive:
		r.State = ingest.TxApplying
	case asynq.TaskStateRetry:
		r.State = ingest.TxRetrying
	case asynq.TaskStateArchived:
		r.State = ingest.TxDead
	case asynq.TaskStateCompleted:
		r.State = ingest.TxCommitted
	}
	if r.LastError == "" {
		r.LastError = ti.LastErr
	}
	return r, nil
}

// Idempotency-Key answers.

// IdemEntry is the stored answer of a request made with an Idempotency-Key.
type IdemEntry struct {
	Hash     string          `json:"hash"` // of method, path and body
	Done     bool            `json:"done"` // false while the first request is in progress
	Status   int             `json:"status,omitempty"`
	Location string          `json:"location,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
}

func idemKey(user int64, keyDigest string) string {
	return idemPrefix + strconv.FormatInt(user, 10) + ":" + keyDigest
}

// BeginIdempotent claims an Idempotency-Key for a request with fingerprint hash. It returns the
// stored entry when the key was used before (the caller replays or refuses), or nil when this
// request now owns the key and must call FinishIdempotent or AbortIdempotent.
func (b *Buffer) BeginIdempotent(ctx context.Context, user int64, keyDigest, hash string) (*IdemEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, _ := json.Marshal(IdemEntry{Hash: hash})
	k := idemKey(user, keyDigest)
	for range 3 {
		ok, err := b.rdb.SetNX(ctx, k, v, inProgressTTL).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if ok {
			return nil, nil
		}
		s, err := b.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired in between
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		var e IdemEntry
		if json.Unmarshal([]byte(s), &e) != nil {
			return nil, fmt.Errorf("%w: unreadable idempotency entry", ErrUnavailable)
		}
		return &e, nil
	}
	return nil, fmt.Errorf("%w: idempotency key contended", ErrUnavailable)
}

// FinishIdempotent stores the answer of the request owning the key, for ttl.
func (b *Buffer) FinishIdempotent(ctx context.Context, user int64, keyDigest string, e IdemEntry, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	e.Done = true
	v, _ := json.Marshal(e)
	return b.rdb.Set(ctx, idemKey(user, keyDigest), v, ttl).Err()
}

// AbortIdempotent frees the key of a request that did not succeed, so a retry can run.
func (b *Buffer) AbortIdempotent(ctx context.Context, user int64, keyDigest string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	_ = b.rdb.Del(ctx, idemKey(user, keyDigest)).Err()
}

// IsUnavailable reports whether err means Redis could not be reached.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// RecordDirect records the receipt of a write applied without buffering (committed at once);
// best effort: the write is in the database whatever Redis says.
func (b *Buffer) RecordDirect(ctx context.Context, w Write, lsn string, committedAt time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	ids := make([]string, 0, min(len(w.Items), 100))
	for _, it := range w.Items[:min(len(w.Items), 100)] {
		ids = append(ids, it.ID)
	}
	info, _ := json.Marshal(txInfo{TaskID: w.TaskID, Kind: ingest.KindOf(w.TaskType), IDs: ids, At: committedAt})
	st := txStatePrefix + w.Tx
	pipe := b.rdb.Pipeline()
	pipe.Set(ctx, txPrefix+w.Tx, info, txTTL)
	pipe.HSet(ctx, st, "committed_at", committedAt.UTC().Format(time.RFC3339Nano), "lsn", lsn, "attempts", 1)
	pipe.PExpire(ctx, st, txTTL)
	_, _ = pipe.Exec(ctx)
}

// Secondary sites (DESIGN §3): a replayed transaction's records stay in the read cache after the
// commit in the main primary until this site's read replica has replayed the commit, so a client
// at the observatory reads its own writes at every moment.
const (
	replWaitKey   = "ingest:replwait"   // sorted set of committed transactions, score ≈ commit LSN
	replItemsPref = "ingest:replitems:" // + tx → JSON of the items to evict once replicated
)

// ParseLSN turns PostgreSQL's "X/Y" WAL position into a number (ok false for "" or garbage).
func ParseLSN(s string) (uint64, bool) {
	hi, lo, found := strings.Cut(s, "/")
	if !found {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return h<<32 | l, true
}

// MarkCommitted is Evict for a secondary site: the receipt records the commit (state committed)
// but the records stay cached; ReleaseReplicated evicts them once the replica has passed lsn. A
// commit whose LSN is unknown (the position query failed after the commit) is evicted at once, as
// at a main site: a read may then miss it until the replica catches up (rare; logged nowhere yet).
func (b *Buffer) MarkCommitted(ctx context.Context, tx string, items []Item, lsn string, committedAt time.Time) error {
	n, ok := ParseLSN(lsn)
	if !ok {
		return b.Evict(ctx, tx, items, lsn, committedAt)
	}
	enc, err := json.Marshal(items)
	if err != nil {
		return err
	}
	pipe := b.rdb.TxPipeline()
	pipe.Set(ctx, replItemsPref+tx, enc, recordTTL)
	pipe.ZAdd(ctx, replWaitKey, redis.Z{Score: float64(n), Member: tx + "|" + lsn})
	queueCommit(ctx, pipe, tx, lsn, committedAt)
	_, err = pipe.Exec(ctx)
	return err
}

// ReleaseReplicated evicts the cached records of every committed transaction whose commit LSN the
// local replica has replayed (replay, from pg_last_wal_replay_lsn()) and marks their receipts
// replicated. It returns how many transactions it released.
func (b *Buffer) ReleaseReplicated(ctx context.Context, replay uint64) (int, error) {
	// Scores are float64 (exact up to 2^53 bytes of WAL); the exact comparison is done on the
	// LSN text kept in the member.
	cands, err := b.rdb.ZRangeByScore(ctx, replWaitKey, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatFloat(float64(replay)*(1+1e-15)+1, 'f', 0, 64), Count: 1000}).Result()
	if err != nil {
		return 0, err
	}
	released := 0
	for _, m := range cands {
		tx, lsn, _ := strings.Cut(m, "|")
		if n, ok := ParseLSN(lsn); !ok || n > replay {
			continue
		}
		enc, err := b.rdb.Get(ctx, replItemsPref+tx).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return released, err
		}
		var items []Item
		_ = json.Unmarshal(enc, &items)
		pipe := b.rdb.TxPipeline()
		queueRemoval(ctx, pipe, items)
		pipe.HSet(ctx, txStatePrefix+tx, "replicated_at", time.Now().UTC().Format(time.RFC3339Nano))
		pipe.Del(ctx, replItemsPref+tx)
		pipe.ZRem(ctx, replWaitKey, m)
		if _, err := pipe.Exec(ctx); err != nil {
			return released, err
		}
		released++
	}
	return released, nil
}

// CommittedTxs reports which of the transactions have committed in the main database (their
// records may still be cached at a secondary site, waiting for the replica).
func (b *Buffer) CommittedTxs(ctx context.Context, txs ...string) (map[string]bool, error) {
	out := make(map[string]bool, len(txs))
	if len(txs) == 0 {
		return out, nil
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(txs))
	for i, tx := range txs {
		cmds[i] = pipe.HExists(ctx, txStatePrefix+tx, "committed_at")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for i, c := range cmds {
		if c.Val() {
			out[txs[i]] = true
		}
	}
	return out, nil
}

// queueRemoval adds to pipe the removal of items' cached records and index entries, in chunks of
// 1,000 keys per DEL.
func queueRemoval(ctx context.Context, pipe redis.Pipeliner, items []Item) {
	for start := 0; start < len(items); start += 1000 {
		chunk := items[start:min(start+1000, len(items))]
		keys := make([]string, len(chunk))
		for i, it := range chunk {
			keys[i] = recKey(it.Kind, it.ID)
			if it.Index != "" {
				pipe.SRem(ctx, it.Index, it.ID)
			}
		}
		pipe.Del(ctx, keys...)
	}
}
