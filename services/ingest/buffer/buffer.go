// Package buffer is the Redis side of ingest: the read cache of buffered records, the asynq
// queue the worker drains, Idempotency-Key answers and transaction receipts.
//
// A buffered write is held once both its cache entries and its task are in Redis; only then does
// the API answer 201. Both are written by one Lua script in one round trip (holdScript), so a
// write is held entirely or not at all: the script refuses a different record under an id
// already held, caches the records and enqueues the task (with a TaskID derived from the record
// ids) exactly as asynq's own client would. The worker removes entries only after their rows are
// committed (an operator's drop of a dead letter removes its entries too), and a read consults
// the cache before the database, so a read never misses a write it was told is held.
package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/groupcommit"
	"github.com/obsops/obsops/services/ingest"
)

// Redis keys (all under "ingest:").
const (
	recPrefix      = "ingest:rec:"      // + kind → hash: id → "<hash>|<tx>|<record json>"
	ouIndexPrefix  = "ingest:ou:"       // + obs unit id → set of buffered executed obs unit ids
	pkgIndexPrefix = "ingest:pkgfiles:" // + package id → set of buffered file ids naming it
	txPrefix       = "ingest:tx:"       // + tx → JSON txInfo
	txStatePrefix  = "ingest:txstate:"  // + tx → hash: attempts, last_error, committed_at, lsn
	idemPrefix     = "ingest:idem:"     // + user id + ":" + key digest → JSON idemEntry
)

// How long entries live. Cached records have no TTL: holdScript caches a write's records and
// enqueues its task atomically, and they leave the cache when their rows are committed (Evict,
// ReleaseReplicated) or their dead letter is dropped (Forget).
const (
	// replItemsTTL bounds how long a secondary site remembers what to evict once replicated.
	replItemsTTL = 30 * 24 * time.Hour
	txTTL        = 7 * 24 * time.Hour
	// inProgressTTL bounds how long an Idempotency-Key stays locked by a request that died.
	inProgressTTL = 30 * time.Second
	hashLen       = 32
)

// Buffer is the Redis side of ingest.
type Buffer struct {
	rdb     redis.UniversalClient
	client  *asynq.Client
	insp    *asynq.Inspector
	timeout time.Duration
	hold    *redis.Script
	reclaim *redis.Script
	rounds  groupcommit.Group[holdRound]
}

// New returns the buffer on rdb; timeout bounds each Redis round trip of a write.
func New(rdb redis.UniversalClient, timeout time.Duration) *Buffer {
	return &Buffer{
		rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		timeout: timeout, hold: redis.NewScript(holdScript), reclaim: redis.NewScript(reclaimScript),
	}
}

// OUIndex is the index of buffered executions of obs unit id.
func OUIndex(obsUnitID int64) string { return ouIndexPrefix + strconv.FormatInt(obsUnitID, 10) }

// PackageIndex is the index of buffered files naming package id.
func PackageIndex(id string) string { return pkgIndexPrefix + id }

// OUIndex is OUIndex, for the use cases (ingest.Buffer).
func (*Buffer) OUIndex(obsUnitID int64) string { return OUIndex(obsUnitID) }

// PackageIndex is PackageIndex, for the use cases (ingest.Buffer).
func (*Buffer) PackageIndex(id string) string { return PackageIndex(id) }

// The buffer is what the use cases hold their writes in.
var _ ingest.Buffer = (*Buffer)(nil)

// recHash is the hash of the cached records of one kind (field: the record's id). One hash per
// kind rather than one key per record: holdScript caches a 1,000-file write with one HSET instead
// of 1,000 SETs with their TTLs, a third of the Redis CPU a bulk file cost.
func recHash(kind string) string { return recPrefix + kind }

// holdScript holds the writes of one round and enqueues the one task that applies those it
// accepts. Per write, in order: it refuses the write if a different record is held under one of
// its ids (conflict); answers the original transaction if every record is already held,
// identical (replay — or unqueued when that transaction's task is gone, taken off the queue by
// hand: the caller enqueues it again); else caches the records in their kind's hash (one HSET
// per 1,000 records; only the records not held yet when some are) with their index entries, and
// the transaction's receipt info, and accepts its payload. The records held already are asked
// for with one HMGET per 1,000 ids. The task is written the way asynq's client does (asynq
// v0.26's enqueue script: the task hash with its encoded message, state pending and
// pending_since, its id pushed on the queue's pending list, the queue in the set of queues; see
// messageParts), unless a task with its id is already there. Its message is head .. payload
// field .. tail: the payload is known only here (the accepted writes), so the script encodes that
// one protobuf field itself (tag 0x12 = field 2, length-delimited, then the length as a varint).
//
// KEYS: task key, pending list, set of queues, then per write its tx key and its records' hash.
// ARGV: tx TTL ms, now (unix ns), queue, task id, message head, message tail, wrap ("1": the
// payload is {"writes":[…]} of the accepted writes' payloads; "0": the one write's payload as it
// is), number of writes; then per write: number of records n, number of index entries m, tx, tx
// info, payload, then n pairs (record id, cache entry), then m pairs (index set, member). Replies
// one {outcome, detail} per write: {"new", ""}, {"replay", tx}, {"unqueued", tx} or {"conflict",
// i} (1-based record).
const holdScript = `
local function varint(n)
  local s = ''
  while n >= 128 do s = s .. string.char(n % 128 + 128); n = math.floor(n / 128) end
  return s .. string.char(n)
end
local out, accepted, fresh = {}, {}, {}
local k, a = 4, 9
for w = 1, tonumber(ARGV[8]) do
  local n, m, tx, info, payload = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local txkey, hkey, ra = KEYS[k], KEYS[k + 1], a + 5
  local ia = ra + 2 * n
  k, a = k + 2, ia + 2 * m
  local vals = {}
  for c = 0, n - 1, 1000 do
    local ids = {}
    for i = c, math.min(c + 999, n - 1) do ids[#ids + 1] = ARGV[ra + 2 * i] end
    local got = redis.call('HMGET', hkey, unpack(ids))
    for j = 1, #got do vals[c + j] = got[j] end
  end
  local held, first, conflict = 0, nil, nil
  for i = 1, n do
    local v = vals[i]
    if v then
      local e = ARGV[ra + 2 * i - 1]
      local h = string.sub(e, 1, string.find(e, '|', 1, true))
      if string.sub(v, 1, #h) ~= h then conflict = i break end
      held = held + 1
      if not first then first = string.sub(v, #h + 1, #h + 36) end
    end
  end
  if conflict then
    out[w] = {'conflict', tostring(conflict)}
  elseif n > 0 and held == n then
    local queued = fresh[first] or false
    if not queued then
      local ti = redis.call('GET', 'ingest:tx:' .. first)
      local ok, d = pcall(cjson.decode, ti or '')
      queued = ok and type(d) == 'table' and type(d.task) == 'string' and
               redis.call('EXISTS', 'asynq:{' .. ARGV[3] .. '}:t:' .. d.task) == 1
    end
    out[w] = {queued and 'replay' or 'unqueued', first}
  else
    if held == 0 then
      for c = 0, n - 1, 1000 do
        local s = ra + 2 * c
        redis.call('HSET', hkey, unpack(ARGV, s, s + 2 * math.min(1000, n - c) - 1))
      end
    else
      for i = 1, n do
        if not vals[i] then redis.call('HSET', hkey, ARGV[ra + 2 * i - 2], ARGV[ra + 2 * i - 1]) end
      end
    end
    for j = 0, m - 1 do redis.call('SADD', ARGV[ia + 2 * j], ARGV[ia + 2 * j + 1]) end
    redis.call('SET', txkey, info, 'PX', ARGV[1])
    fresh[tx] = true
    accepted[#accepted + 1] = payload
    out[w] = {'new', ''}
  end
end
if #accepted > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  local p = accepted[1]
  if ARGV[7] == '1' then p = '{"writes":[' .. table.concat(accepted, ',') .. ']}' end
  redis.call('HSET', KEYS[1], 'msg', ARGV[5] .. '\18' .. varint(#p) .. p .. ARGV[6], 'state', 'pending', 'pending_since', ARGV[2])
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('SADD', KEYS[3], ARGV[3])
end
return out
`

// asynq's Redis layout (v0.26, internal/base): the keys holdScript writes a task under.
func asynqTaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }
func asynqPendingKey(queue string) string  { return "asynq:{" + queue + "}:pending" }

const asynqQueuesKey = "asynq:queues"

func asynqActiveKey(queue string) string { return "asynq:{" + queue + "}:active" }
func asynqLeaseKey(queue string) string  { return "asynq:{" + queue + "}:lease" }

// reclaimScript puts one orphaned task back on the pending list, as asynq's own Requeue (v0.26,
// internal/rdb) does at a worker's shutdown — only if its lease (a score in unix seconds) is
// still older than the cutoff, so a task whose lease a worker extended meanwhile stays with it.
// KEYS: active list, lease set, pending list, task key. ARGV: task id, cutoff (unix seconds).
const reclaimScript = `
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not lease or tonumber(lease) >= tonumber(ARGV[2]) then return 0 end
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], 'state', 'pending')
return 1
`

// ReclaimOrphans puts back on the queue every task whose lease expired before cutoff: taken by
// a worker that died, or whose hand-over was lost when Redis itself died (the dequeue was
// written to the AOF, its reply never reached the worker). asynq recovers such tasks too, but
// only 30 s after their lease expired and in a check once a minute — up to two minutes with
// nothing applied; this takes them back as soon as the cutoff allows. A task taken from a
// worker that was merely stalled is applied twice, which the idempotent apply makes harmless.
// It returns how many tasks it put back.
func (b *Buffer) ReclaimOrphans(ctx context.Context, cutoff time.Time) (int, error) {
	q := ingest.Queue
	ids, err := b.rdb.ZRangeByScore(ctx, asynqLeaseKey(q), &redis.ZRangeBy{
		Min: "-inf", Max: "(" + strconv.FormatInt(cutoff.Unix(), 10), Count: 1000}).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		keys := []string{asynqActiveKey(q), asynqLeaseKey(q), asynqPendingKey(q), asynqTaskKey(q, id)}
		done, err := b.reclaim.Run(ctx, b.rdb, keys, id, cutoff.Unix()).Int()
		if err != nil {
			return n, err
		}
		n += done
	}
	return n, nil
}

// messageParts encodes a task as asynq v0.26 stores it (internal/proto TaskMessage, protobuf),
// without its payload: head is the type (field 1), tail the id (3), queue (4), retry (5) and
// timeout in seconds (8); holdScript puts the payload (field 2) between them. Every other field
// is at its zero value (no deadline, no uniqueness, no group, no retention), as asynq's client
// leaves it for these options. TestHoldEnqueuesLikeAsynq reads tasks back with asynq's inspector
// and has its server process them, so an asynq upgrade that changes the layout fails there.
func messageParts(typ, id, queue string, retry int, timeout time.Duration) (head, tail []byte) {
	head = protowire.AppendTag(nil, 1, protowire.BytesType)
	head = protowire.AppendString(head, typ)
	tail = make([]byte, 0, len(id)+len(queue)+16)
	tail = protowire.AppendTag(tail, 3, protowire.BytesType)
	tail = protowire.AppendString(tail, id)
	tail = protowire.AppendTag(tail, 4, protowire.BytesType)
	tail = protowire.AppendString(tail, queue)
	tail = protowire.AppendTag(tail, 5, protowire.VarintType)
	tail = protowire.AppendVarint(tail, uint64(retry))
	tail = protowire.AppendTag(tail, 8, protowire.VarintType)
	tail = protowire.AppendVarint(tail, uint64(timeout/time.Second))
	return head, tail
}

// receiptIDs are the record ids a receipt lists: the first 100 of its write.
func receiptIDs(items []ingest.Item) []string {
	ids := make([]string, min(len(items), 100))
	for i := range ids {
		ids[i] = items[i].ID
	}
	return ids
}

// txInfo is what a receipt starts from.
type txInfo struct {
	TaskID string    `json:"task"`
	Kind   string    `json:"kind"`
	IDs    []string  `json:"ids,omitempty"`
	At     time.Time `json:"at"`
}

// Writes are held in rounds (a group commit, pkg/groupcommit): a small write (up to
// coalesceItems records: a start, a finish, a package, a single file or a small bulk) joins the
// round that gathers while the one in flight runs, and one script call holds every write of the
// round and enqueues one task for all of them (ingest.TaskWrites; a round of one write enqueues
// that write's own task, as a larger write always does). Alone, a write is held at once; under
// load one Redis round trip, one queue task and one worker transaction serve many requests —
// per single-file registration, the buffer's and the worker's share of the work fell from ~27
// Redis commands, four round trips and one database statement to a fraction of that (README,
// "Benchmarks").
const (
	// coalesceItems is the most records a write may have to join a round.
	coalesceItems = 64
	// roundItems bounds the records of one script call (one task): a larger round is held as
	// several calls, pipelined in one round trip.
	roundItems = 1000
)

// holdRound is the writes one round holds.
type holdRound struct{ writes []*heldWrite }

// heldWrite is one write in a round and how it was held.
type heldWrite struct {
	w       ingest.Write
	outcome string // holdScript's: new, replay, unqueued, conflict
	detail  string
	err     error
}

// Hold caches the write's records and enqueues its task, in one round trip (holdScript), shared
// with the writes that arrive at the same moment. It returns only once Redis has taken both
// (appendfsync always: the write is on disk), or an error: ingest.ErrBufferUnavailable (the
// write is not known to be held: answer 503) or *ConflictError. A caller that gives up while
// its round is in flight may find its write held later (a retry then replays it).
func (b *Buffer) Hold(ctx context.Context, w ingest.Write) (ingest.HoldResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	hw := &heldWrite{w: w}
	if len(w.Items) > coalesceItems {
		b.holdRound(&holdRound{writes: []*heldWrite{hw}})
	} else if _, err := b.rounds.Join(ctx, func(r *holdRound) { r.writes = append(r.writes, hw) }, func(r *holdRound) error {
		b.holdRound(r)
		return nil
	}); err != nil {
		return ingest.HoldResult{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	if hw.err != nil {
		return ingest.HoldResult{}, hw.err
	}
	switch hw.outcome {
	case "conflict":
		i, _ := strconv.Atoi(hw.detail)
		return ingest.HoldResult{}, &ingest.BufferConflictError{Index: i - 1, ID: w.Items[i-1].ID}
	case "replay":
		return ingest.HoldResult{Tx: hw.detail, Replayed: true}, nil
	case "unqueued":
		// Every record is held already but the original task is gone (deleted by hand while
		// its records stayed cached): enqueue it again, with the original transaction.
		payload, err := w.Payload(hw.detail)
		if err != nil {
			return ingest.HoldResult{}, fmt.Errorf("encode task: %w", err)
		}
		if err := b.RequeueEach(ctx, []Requeue{{Tx: hw.detail, TaskType: w.TaskType, TaskID: w.TaskID, Payload: payload}}); err != nil {
			return ingest.HoldResult{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		return ingest.HoldResult{Tx: hw.detail, Replayed: true}, nil
	}
	return ingest.HoldResult{Tx: w.Tx}, nil
}

// holdRound holds the writes of r, roundItems records per script call, the calls pipelined, and
// notes each write's outcome (or error) in it.
func (b *Buffer) holdRound(r *holdRound) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	var calls [][]*heldWrite
	items := 0
	for _, hw := range r.writes {
		if n := len(calls); n == 0 || (items+len(hw.w.Items) > roundItems && len(calls[n-1]) > 0) {
			calls, items = append(calls, nil), 0
		}
		calls[len(calls)-1] = append(calls[len(calls)-1], hw)
		items += len(hw.w.Items)
	}
	fail := func(ws []*heldWrite, err error) {
		for _, hw := range ws {
			hw.err = err
		}
	}
	type call struct {
		ws   []*heldWrite
		keys []string
		args []any
	}
	var prepared []call
	for _, ws := range calls {
		keys, args, err := holdArgs(ws)
		if err != nil {
			fail(ws, err)
			continue
		}
		prepared = append(prepared, call{ws, keys, args})
	}
	if len(prepared) == 0 {
		return
	}
	cmds := make([]*redis.Cmd, len(prepared))
	run := func(eval func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd) error {
		pipe := b.rdb.Pipeline()
		for i, c := range prepared {
			cmds[i] = eval(pipe, c.keys, c.args...)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
		return b.hold.EvalSha(ctx, p, keys, args...)
	})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Not in Redis' script cache (a restarted Redis): the whole script once more.
		err = run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
			return b.hold.Eval(ctx, p, keys, args...)
		})
	}
	for i, c := range prepared {
		res, cerr := cmds[i].Slice()
		if cerr == nil && len(res) != len(c.ws) {
			cerr = fmt.Errorf("hold script answered %d outcomes for %d writes", len(res), len(c.ws))
		}
		if cerr != nil {
			if err == nil {
				err = cerr
			}
			fail(c.ws, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err))
			continue
		}
		for j, hw := range c.ws {
			o, _ := res[j].([]any)
			if len(o) == 2 {
				hw.outcome, _ = o[0].(string)
				hw.detail, _ = o[1].(string)
			}
			if hw.outcome == "" {
				hw.err = fmt.Errorf("%w: unreadable hold outcome %v", ingest.ErrBufferUnavailable, res[j])
			}
		}
	}
}

// holdArgs are holdScript's keys and arguments for holding ws with one task: the write's own
// task for a single write, else an ingest.TaskWrites task of its own id.
func holdArgs(ws []*heldWrite) ([]string, []any, error) {
	typ, id, wrap := ws[0].w.TaskType, ws[0].w.TaskID, "0"
	if len(ws) > 1 {
		typ, id, wrap = ingest.TaskWrites, ingest.WritesTaskID(), "1"
	}
	head, tail := messageParts(typ, id, ingest.Queue, MaxRetry, TaskTimeout)
	now := time.Now()
	keys := make([]string, 3, 3+2*len(ws))
	keys[0], keys[1], keys[2] = asynqTaskKey(ingest.Queue, id), asynqPendingKey(ingest.Queue), asynqQueuesKey
	args := []any{txTTL.Milliseconds(), now.UnixNano(), ingest.Queue, id, head, tail, wrap, len(ws)}
	for _, hw := range ws {
		w := hw.w
		if len(w.Items) == 0 {
			return nil, nil, errors.New("a write without records")
		}
		kind, indexed := w.Items[0].Kind, 0
		for _, it := range w.Items {
			if it.Kind != kind {
				return nil, nil, fmt.Errorf("a write of records of two kinds (%s, %s)", kind, it.Kind)
			}
			if it.Index != "" {
				indexed++
			}
		}
		info, err := json.Marshal(txInfo{TaskID: id, Kind: ingest.KindOf(w.TaskType), IDs: receiptIDs(w.Items), At: now.UTC()})
		if err != nil {
			return nil, nil, err
		}
		payload, err := w.Payload(w.Tx)
		if err != nil {
			return nil, nil, fmt.Errorf("encode task: %w", err)
		}
		if wrap == "1" { // json.Marshal(ingest.SubWrite{…}) without compacting the payload again
			payload = append(append(append(append([]byte(`{"type":"`), w.TaskType...), `","payload":`...), payload...), '}')
		}
		keys = append(keys, txPrefix+w.Tx, recHash(kind))
		args = slices.Grow(args, 5+2*len(w.Items)+2*indexed)
		args = append(args, len(w.Items), indexed, w.Tx, info, payload)
		for _, it := range w.Items {
			var v []byte // go-redis sends []byte as it is, but not a json.RawMessage
			if raw, encoded := it.Record.(json.RawMessage); encoded {
				v = raw
			} else if v, err = json.Marshal(it.Record); err != nil {
				return nil, nil, fmt.Errorf("encode record: %w", err)
			}
			entry := make([]byte, 0, len(it.Hash)+len(w.Tx)+len(v)+2) // as parseCached reads it
			entry = append(append(append(append(append(entry, it.Hash...), '|'), w.Tx...), '|'), v...)
			args = append(args, it.ID, entry)
		}
		for _, it := range w.Items {
			if it.Index != "" {
				args = append(args, it.Index, it.ID)
			}
		}
	}
	return keys, args, nil
}

// Requeue is a write to enqueue again as a task of its own (see RequeueEach): its transaction,
// its own task's type and id, and the payload it was held with.
type Requeue struct {
	Tx, TaskType, TaskID string
	Payload              []byte
}

// RequeueEach enqueues each write as a task of its own and points its receipt at that task; a
// task id already taken (the write queued, or a dead letter, already) is left as it is. The
// worker uses it to take apart a coalesced task one of whose writes cannot apply; Hold, to
// enqueue again a write whose task was taken off the queue by hand.
func (b *Buffer) RequeueEach(ctx context.Context, reqs []Requeue) error {
	for _, r := range reqs {
		_, err := b.client.EnqueueContext(ctx, asynq.NewTask(r.TaskType, r.Payload), asynq.Queue(ingest.Queue), asynq.TaskID(r.TaskID),
			asynq.MaxRetry(MaxRetry), asynq.Timeout(TaskTimeout))
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			return err
		}
		s, err := b.rdb.Get(ctx, txPrefix+r.Tx).Result()
		if errors.Is(err, redis.Nil) {
			continue // the receipt is older than its TTL: nothing to point
		}
		if err != nil {
			return err
		}
		var info txInfo
		if json.Unmarshal([]byte(s), &info) != nil {
			continue
		}
		info.TaskID = r.TaskID
		enc, err := json.Marshal(info)
		if err != nil {
			return err
		}
		if err := b.rdb.Set(ctx, txPrefix+r.Tx, enc, redis.KeepTTL).Err(); err != nil {
			return err
		}
	}
	return nil
}

// MaxRetry is how often a task whose failure is neither an outage nor known to be permanent is
// retried before it becomes a dead letter. Outages never count (see worker.IsFailure).
const MaxRetry = 25

// TaskTimeout bounds one attempt to apply a task (a hung database connection is given up and
// the task retried).
const TaskTimeout = time.Minute

func parseCached(v string) (ingest.Cached, bool) {
	if len(v) < hashLen+38 || v[hashLen] != '|' || v[hashLen+37] != '|' {
		return ingest.Cached{}, false
	}
	return ingest.Cached{Hash: v[:hashLen], Tx: v[hashLen+1 : hashLen+37], Record: json.RawMessage(v[hashLen+38:])}, true
}

// Get reads cached records of one kind by id; missing ones are absent from the map.
func (b *Buffer) Get(ctx context.Context, kind string, ids ...string) (map[string]ingest.Cached, error) {
	out := make(map[string]ingest.Cached, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	for start := 0; start < len(ids); start += 1000 {
		end := min(start+1000, len(ids))
		vals, err := b.rdb.HMGet(ctx, recHash(kind), ids[start:end]...).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
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
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	return m, nil
}

// Exists reports which of the ids are held in the cache as kind: one pipelined HEXISTS per id,
// so checking the up to 10,000 files of a package moves no record over the wire.
func (b *Buffer) Exists(ctx context.Context, kind string, ids ...string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := b.rdb.Pipeline()
	found := make([]*redis.BoolCmd, len(ids))
	for i, id := range ids {
		found[i] = pipe.HExists(ctx, recHash(kind), id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	for i, f := range found {
		if f.Val() {
			out[ids[i]] = true
		}
	}
	return out, nil
}

// Applied is one write whose rows committed: its transaction and its records.
type Applied struct {
	Tx    string
	Items []ingest.Item
}

// Evict removes committed records from the cache and records each commit in its transaction's
// receipt, in one round trip; called by the worker after its transaction committed.
func (b *Buffer) Evict(ctx context.Context, applied []Applied, lsn string, committedAt time.Time) error {
	pipe := b.rdb.Pipeline()
	for _, a := range applied {
		queueRemoval(ctx, pipe, a.Items)
		queueCommit(ctx, pipe, a.Tx, lsn, committedAt)
	}
	queueLastApply(ctx, pipe, committedAt)
	_, err := pipe.Exec(ctx)
	return err
}

// Forget removes records from the cache without a commit: those of a dead letter an operator
// dropped, whose write will never apply (the reads stop showing it as buffered).
func (b *Buffer) Forget(ctx context.Context, items []ingest.Item) error {
	pipe := b.rdb.Pipeline()
	queueRemoval(ctx, pipe, items)
	_, err := pipe.Exec(ctx)
	return err
}

// queueCommit adds to pipe the receipt of a commit of tx: commit time, WAL position, one more
// attempt.
func queueCommit(ctx context.Context, pipe redis.Pipeliner, tx, lsn string, committedAt time.Time) {
	st := txStatePrefix + tx
	pipe.HSet(ctx, st, "committed_at", committedAt.UTC().Format(time.RFC3339Nano), "lsn", lsn)
	pipe.HIncrBy(ctx, st, "attempts", 1)
	pipe.PExpire(ctx, st, txTTL)
}

// queueLastApply adds to pipe the time of the last commit, for /buffer-stats (once per pipeline
// of commits).
func queueLastApply(ctx context.Context, pipe redis.Pipeliner, committedAt time.Time) {
	pipe.Set(ctx, contract.IngestLastApplyKey, strconv.FormatInt(committedAt.UnixMilli(), 10), 0)
}

// RecordFailure notes a failed attempt in the receipts of the transactions, in one round trip.
func (b *Buffer) RecordFailure(ctx context.Context, err error, txs ...string) {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	pipe := b.rdb.Pipeline()
	for _, tx := range txs {
		st := txStatePrefix + tx
		pipe.HIncrBy(ctx, st, "attempts", 1)
		pipe.HSet(ctx, st, "last_error", msg)
		pipe.PExpire(ctx, st, txTTL)
	}
	_, _ = pipe.Exec(ctx)
}

// Receipt tells where a buffered transaction is: committed once the worker recorded its commit,
// else the state of its task in the queue.
func (b *Buffer) Receipt(ctx context.Context, tx string) (ingest.Receipt, error) {
	pipe := b.rdb.Pipeline()
	infoCmd := pipe.Get(ctx, txPrefix+tx)
	stCmd := pipe.HGetAll(ctx, txStatePrefix+tx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	st := stCmd.Val()
	r := ingest.Receipt{TransactionID: tx, State: ingest.TxBuffered, LastError: st["last_error"]}
	r.Attempts, _ = strconv.Atoi(st["attempts"])
	var info txInfo
	if s, err := infoCmd.Result(); err == nil {
		_ = json.Unmarshal([]byte(s), &info)
		r.Kind, r.RecordIDs = info.Kind, info.IDs
	} else if len(st) == 0 {
		return ingest.Receipt{}, ingest.ErrNoTransaction
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
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
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

func idemKey(user int64, keyDigest string) string {
	return idemPrefix + strconv.FormatInt(user, 10) + ":" + keyDigest
}

// BeginIdempotent claims an Idempotency-Key for a request with fingerprint hash. It returns the
// stored entry when the key was used before (the caller replays or refuses), or nil when this
// request now owns the key and must call FinishIdempotent or AbortIdempotent.
func (b *Buffer) BeginIdempotent(ctx context.Context, user int64, keyDigest, hash string) (*ingest.IdemEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, _ := json.Marshal(ingest.IdemEntry{Hash: hash})
	k := idemKey(user, keyDigest)
	for range 3 {
		ok, err := b.rdb.SetNX(ctx, k, v, inProgressTTL).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		if ok {
			return nil, nil
		}
		s, err := b.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired in between
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		var e ingest.IdemEntry
		if json.Unmarshal([]byte(s), &e) != nil {
			return nil, fmt.Errorf("%w: unreadable idempotency entry", ingest.ErrBufferUnavailable)
		}
		return &e, nil
	}
	return nil, fmt.Errorf("%w: idempotency key contended", ingest.ErrBufferUnavailable)
}

// FinishIdempotent stores the answer of the request owning the key, for ttl.
func (b *Buffer) FinishIdempotent(ctx context.Context, user int64, keyDigest string, e ingest.IdemEntry, ttl time.Duration) error {
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

// RecordDirect records the receipt of a write applied without buffering (committed at once);
// best effort: the write is in the database whatever Redis says.
func (b *Buffer) RecordDirect(ctx context.Context, w ingest.Write, lsn string, committedAt time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	info, _ := json.Marshal(txInfo{TaskID: w.TaskID, Kind: ingest.KindOf(w.TaskType), IDs: receiptIDs(w.Items), At: committedAt})
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

// MarkCommitted is Evict for a secondary site: each receipt records its commit (state
// committed) but the records stay cached; ReleaseReplicated evicts them once the replica has
// passed lsn. A commit whose LSN is unknown (the position query failed after the commit) is
// evicted at once, as at a main site (the worker avoids this: it retries the task to learn a
// position; see worker.errNoLSN).
func (b *Buffer) MarkCommitted(ctx context.Context, applied []Applied, lsn string, committedAt time.Time) error {
	n, ok := ParseLSN(lsn)
	if !ok {
		return b.Evict(ctx, applied, lsn, committedAt)
	}
	pipe := b.rdb.TxPipeline()
	for _, a := range applied {
		enc, err := json.Marshal(a.Items)
		if err != nil {
			return err
		}
		pipe.Set(ctx, replItemsPref+a.Tx, enc, replItemsTTL)
		pipe.ZAdd(ctx, replWaitKey, redis.Z{Score: float64(n), Member: a.Tx + "|" + lsn})
		queueCommit(ctx, pipe, a.Tx, lsn, committedAt)
	}
	queueLastApply(ctx, pipe, committedAt)
	_, err := pipe.Exec(ctx)
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
		var items []ingest.Item
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
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	for i, c := range cmds {
		if c.Val() {
			out[txs[i]] = true
		}
	}
	return out, nil
}

// queueRemoval adds to pipe the removal of items' cached records and index entries: one HDEL
// per kind and 1,000 records.
func queueRemoval(ctx context.Context, pipe redis.Pipeliner, items []ingest.Item) {
	byKind := map[string][]string{}
	for _, it := range items {
		byKind[it.Kind] = append(byKind[it.Kind], it.ID)
		if it.Index != "" {
			pipe.SRem(ctx, it.Index, it.ID)
		}
	}
	for kind, ids := range byKind {
		for start := 0; start < len(ids); start += 1000 {
			pipe.HDel(ctx, recHash(kind), ids[start:min(start+1000, len(ids))]...)
		}
	}
}
