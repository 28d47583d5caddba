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

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// Holding a write: its cache entries and its task in one round trip (holdScript), the writes of
// one moment together (a group commit).

// Writes are held in rounds (a group commit, pkg/groupcommit): a small write (up to
// coalesceItems records: a start, a finish, a package, a single file or a small bulk) joins the
// round that gathers while the one in flight runs, and one script call holds every write of the
// round and enqueues one task for all of them (ingest.TaskWrites; a round of one write enqueues
// that write's own task, as a larger write always does). Alone, a write is held at once; under
// load one Redis round trip, one queue task and one worker transaction serve many requests —
// per single-file registration, the buffer's and the worker's share of the work falls from a
// task, several Redis round trips and a database statement each to a fraction of that
// (docs/architecture.md, "Rounds"; make bench prints Redis commands per request).
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
	outcome string // holdScript's: new, replay, unqueued, conflict, claimed, fenced
	detail  string
	err     error
}

// Hold caches the write's records and enqueues its task, in one round trip (holdScript), shared
// with the writes that arrive at the same moment. It returns only once Redis has taken both
// (appendfsync always: the write is on disk), or an error: ingest.ErrBufferUnavailable (the
// write is not known to be held: answer 503), a conflict, or ingest.ErrUnchecked (a write not
// Checked one of whose unique keys this process's committed filter cannot rule out: nothing is
// held; see committed.go). A caller that gives up while its round is in flight may find its
// write held later (a retry then replays it).
func (b *Buffer) Hold(ctx context.Context, w ingest.Write) (ingest.HoldResult, error) {
	if !w.Checked && b.mayBeCommitted(w) {
		return ingest.HoldResult{}, ingest.ErrUnchecked
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	hw := &heldWrite{w: w}
	if len(w.Items) > coalesceItems {
		b.holdRound(&holdRound{writes: []*heldWrite{hw}}) // alone: a round's share is coalesceItems
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
	case "claimed":
		return ingest.HoldResult{}, claimConflict(w, hw.detail)
	case "conflict":
		i, _ := strconv.Atoi(hw.detail)
		return ingest.HoldResult{}, &ingest.BufferConflictError{Index: i - 1, ID: w.Items[i-1].ID}
	case "fenced":
		return ingest.HoldResult{}, &ingest.FencedError{Value: hw.detail}
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
		args = slices.Grow(args, 6+2*len(w.Items)+2*indexed+len(w.Fences))
		args = append(args, len(w.Items), indexed, w.Tx, info, payload, len(w.Fences))
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
		for _, f := range w.Fences {
			args = append(args, f)
		}
		args = appendClaims(args, w.Items)
	}
	return keys, args, nil
}

// Claims (ingest.Claim): holdScript checks and takes a write's claims in the hash claimsKey
// (claim key → owner), after its records and index entries in its arguments: their number c,
// then c pairs (claim key, owner). A write one of whose claims another owner holds is answered
// {"claimed", "j|owner,…"} (1-based claims, every one held by another) and nothing of it is
// held; an accepted write's claims are set with its records, and removed with them
// (queueRemoval).

// appendClaims appends the claims of items to a write's script arguments.
func appendClaims(args []any, items []ingest.Item) []any {
	n := 0
	for _, it := range items {
		n += len(it.Claims)
	}
	args = append(slices.Grow(args, 1+2*n), n)
	for _, it := range items {
		for _, c := range it.Claims {
			args = append(args, c.Key, c.Owner)
		}
	}
	return args
}

// claimConflict reads holdScript's "claimed" detail into the error naming, per claim held by
// another owner, the record that asked for it and that owner.
func claimConflict(w ingest.Write, detail string) error {
	type at struct {
		item  int
		claim ingest.Claim
	}
	var all []at
	for i, it := range w.Items {
		for _, c := range it.Claims {
			all = append(all, at{i, c})
		}
	}
	e := &ingest.ClaimConflictError{}
	for _, part := range strings.Split(detail, ",") {
		j, owner, _ := strings.Cut(part, "|")
		n, err := strconv.Atoi(j)
		if err != nil || n < 1 || n > len(all) {
			return fmt.Errorf("%w: unreadable claim outcome %q", ingest.ErrBufferUnavailable, detail)
		}
		e.Conflicts = append(e.Conflicts, ingest.ClaimConflict{Item: all[n-1].item, Claim: all[n-1].claim, Owner: owner})
	}
	return e
}

// holdScript holds the writes of one round and enqueues the one task that applies those it
// accepts. Per write, in order: it refuses the write if a different record is held under one of
// its ids (conflict); answers the original transaction if every record is already held,
// identical (replay — or unqueued when that transaction's task is gone, taken off the queue by
// hand: the caller enqueues it again); refuses it if one of its fence keys exists (fenced: an obs
// unit being or having been deleted, see fence.go); else caches the records in their kind's
// hash (one HSET per 1,000 records; only the records not held yet when some are) with their
// index entries, and the transaction's receipt info, and accepts its payload. The records held
// already are asked for with one HMGET per 1,000 ids. The task is written the way asynq's client does (asynq
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
// info, payload, number of fence keys f, then n pairs (record id, cache entry), then m pairs
// (index set, member), then f fence keys, then its claims (appendClaims). Replies one
// {outcome, detail} per write: {"new", ""}, {"replay", tx}, {"unqueued", tx}, {"conflict", i}
// (1-based record), {"claimed", "j|owner,…"} or {"fenced", value of the fence key}.
var holdScript = `
local function varint(n)
  local s = ''
  while n >= 128 do s = s .. string.char(n % 128 + 128); n = math.floor(n / 128) end
  return s .. string.char(n)
end
local fv
local function fenced(s, c)
  for j = s, s + c - 1 do
    fv = redis.call('GET', ARGV[j])
    if fv then return true end
  end
  return false
end
local function claimed(ca, c)
  local held = {}
  for s = 0, c - 1, 1000 do
    local ks = {}
    for j = s + 1, math.min(s + 1000, c) do ks[#ks + 1] = ARGV[ca + 2 * j - 1] end
    local owners = redis.call('HMGET', 'ingest:claims', unpack(ks))
    for j = 1, #owners do
      local o = owners[j]
      if o and o ~= ARGV[ca + 2 * (s + j)] then held[#held + 1] = (s + j) .. '|' .. o end
    end
  end
  if #held > 0 then return table.concat(held, ',') end
  return nil
end
local out, accepted, fresh = {}, {}, {}
local k, a = 4, 9
for w = 1, tonumber(ARGV[8]) do
  local n, m, tx, info, payload = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local txkey, hkey, ra = KEYS[k], KEYS[k + 1], a + 6
  local ia = ra + 2 * n
  local fa, f = ia + 2 * m, tonumber(ARGV[a + 5])
  local ca = fa + f
  local c = tonumber(ARGV[ca])
  k, a = k + 2, ca + 1 + 2 * c
  local taken = nil
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
  if not conflict and held < n and c > 0 then taken = claimed(ca, c) end
  if conflict then
    out[w] = {'conflict', tostring(conflict)}
  elseif taken then
    out[w] = {'claimed', taken}
  elseif n > 0 and held == n then
    local queued = fresh[first] or false
    if not queued then
      local ti = redis.call('GET', 'ingest:tx:' .. first)
      local ok, d = pcall(cjson.decode, ti or '')
      queued = ok and type(d) == 'table' and type(d.task) == 'string' and
               redis.call('EXISTS', 'asynq:{' .. ARGV[3] .. '}:t:' .. d.task) == 1
    end
    out[w] = {queued and 'replay' or 'unqueued', first}
  elseif f > 0 and fenced(fa, f) then
    out[w] = {'fenced', fv}
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
    for s = 0, c - 1, 1000 do
      redis.call('HSET', 'ingest:claims', unpack(ARGV, ca + 1 + 2 * s, ca + 2 * math.min(s + 1000, c)))
    end
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
