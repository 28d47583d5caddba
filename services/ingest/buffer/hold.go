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
// hash (only the records not held yet when some are) with their index entries, and the
// transaction's receipt info, and accepts its payload. What is held already — records and
// claims — is asked for once for all the writes of the call (one HMGET per hash and 1,000
// fields), and the accepted writes' records and claims are set once at its end (one HSET per
// hash and 1,000 fields): per write only its receipt's SET (and index SADDs) remain, where a
// single-file write used to cost five commands of its own (HMGET and HSET of its record and of
// its claim, the SET), each also a command in the append-only file. The task is written the way asynq's client does (asynq
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
-- The writes' places in ARGV.
local ws = {}
local k, a = 4, 9
for w = 1, tonumber(ARGV[8]) do
  local n, m, f = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 5])
  local x = {n = n, m = m, f = f, tx = ARGV[a + 2], info = ARGV[a + 3], payload = ARGV[a + 4],
             txkey = KEYS[k], hkey = KEYS[k + 1], ra = a + 6}
  x.ia = x.ra + 2 * n
  x.fa = x.ia + 2 * m
  x.ca = x.fa + f
  x.c = tonumber(ARGV[x.ca])
  ws[w] = x
  k, a = k + 2, x.ca + 1 + 2 * x.c
end
-- What is held already, for every write of the call at once: one HMGET per records' hash and
-- one of the claims (1,000 fields a call). A write accepted with a later write in the call is
-- added to these tables, so the later write sees it as Redis will.
local function fetch(key, fields)
  local got = {}
  for s = 1, #fields, 1000 do
    local r = redis.call('HMGET', key, unpack(fields, s, math.min(s + 999, #fields)))
    for j = 1, #r do got[fields[s + j - 1]] = r[j] end
  end
  return got
end
local ids, cks = {}, {}
for _, x in ipairs(ws) do
  local l = ids[x.hkey]
  if not l then l = {}; ids[x.hkey] = l end
  for i = 0, x.n - 1 do l[#l + 1] = ARGV[x.ra + 2 * i] end
  for j = 1, x.c do cks[#cks + 1] = ARGV[x.ca + 2 * j - 1] end
end
local recs = {}
for h, l in pairs(ids) do recs[h] = fetch(h, l) end
local owners = fetch('ingest:claims', cks)
-- The accepted writes' fields, set once at the end: per hash, ranges of ARGV (first, last
-- index) of field-value pairs, in the order the hashes were first named.
local pend, order = {}, {}
local function add(key, s, e)
  local l = pend[key]
  if not l then l = {}; pend[key] = l; order[#order + 1] = key end
  local o = #l
  l[o + 1], l[o + 2] = s, e
end
local function claimed(x)
  local held = {}
  for j = 1, x.c do
    local o = owners[ARGV[x.ca + 2 * j - 1]]
    if o and o ~= ARGV[x.ca + 2 * j] then held[#held + 1] = j .. '|' .. o end
  end
  if #held > 0 then return table.concat(held, ',') end
  return nil
end
local out, accepted, fresh = {}, {}, {}
for w, x in ipairs(ws) do
  local got, n, ra = recs[x.hkey], x.n, x.ra
  local held, first, conflict = 0, nil, nil
  for i = 1, n do
    local v = got[ARGV[ra + 2 * i - 2]]
    if v then
      local e = ARGV[ra + 2 * i - 1]
      local h = string.sub(e, 1, string.find(e, '|', 1, true))
      if string.sub(v, 1, #h) ~= h then conflict = i break end
      held = held + 1
      if not first then first = string.sub(v, #h + 1, #h + 36) end
    end
  end
  local taken = nil
  if not conflict and held < n and x.c > 0 then taken = claimed(x) end
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
  elseif x.f > 0 and fenced(x.fa, x.f) then
    out[w] = {'fenced', fv}
  else
    local later = w < #ws -- only a later write of the call reads what this one adds
    if held == 0 then
      add(x.hkey, ra, ra + 2 * n - 1)
      if later then for i = 1, n do got[ARGV[ra + 2 * i - 2]] = ARGV[ra + 2 * i - 1] end end
    else
      for i = 1, n do
        local id = ARGV[ra + 2 * i - 2]
        if not got[id] then add(x.hkey, ra + 2 * i - 2, ra + 2 * i - 1); got[id] = ARGV[ra + 2 * i - 1] end
      end
    end
    for j = 0, x.m - 1 do redis.call('SADD', ARGV[x.ia + 2 * j], ARGV[x.ia + 2 * j + 1]) end
    if x.c > 0 then
      add('ingest:claims', x.ca + 1, x.ca + 2 * x.c)
      if later then for j = 1, x.c do owners[ARGV[x.ca + 2 * j - 1]] = ARGV[x.ca + 2 * j] end end
    end
    redis.call('SET', x.txkey, x.info, 'PX', ARGV[1])
    fresh[x.tx] = true
    accepted[#accepted + 1] = x.payload
    out[w] = {'new', ''}
  end
end
for _, key in ipairs(order) do
  local l, t = pend[key], ARGV
  local first, last = l[1], l[2]
  if #l > 2 then -- several ranges: their pairs in one table
    t = {}
    for r = 1, #l, 2 do for j = l[r], l[r + 1] do t[#t + 1] = ARGV[j] end end
    first, last = 1, #t
  end
  for s = first, last, 2000 do redis.call('HSET', key, unpack(t, s, math.min(s + 1999, last))) end
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
