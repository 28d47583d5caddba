package buffer

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"github.com/obsops/obsops/services/ingest"
)

// The committed filter: a Bloom filter, in Redis, of every committed file's path (on its module)
// and of the ids clients choose, so that a registration of a new path — nearly every one — is
// acknowledged without asking PostgreSQL whether a committed file has it (issue 23's rule 2 at
// acknowledgement without a query; docs/decisions.md §48).
//
// Key: committedKey, a string of filterWords 32-bit words after word 0, whose first bit says
// "built" (every committed file has been learnt). It is a blocked Bloom filter: a unique key
// (ingest.Unique) sets filterHashes bits of one word, both chosen by a hash of it (FNV-1a, mixed), and
// "may be taken" when all of them are set. One word per key makes a key one read and at most one
// write of a BITFIELD (seven bits spread over the string cost a bulk registration seven times the
// Redis work, and Lua's argument handling dominated); for that, it needs more bits per key than a
// classic filter for the same false positives.
//
// Invariant: every committed file's keys are set in the filter before it commits, so a key
// whose bits are not all set is not taken. The hold script sets a write's keys in the call that
// holds it (whatever it answers: extra bits only cost a lookup), so every file this site's buffer
// commits is learnt before its task exists; the direct writes learn theirs before they apply
// (Buffer.LearnCommitted); rows committed before the filter existed are learnt by BuildCommitted,
// and a secondary site's replayed files, which never pass this Redis, by TakeReplayed (migration
// 00031's trigger lists them in ingest_replayed_files). Until built (a new or flushed Redis, a
// deleted key: the flag reads 0), the hold script answers "check" to every probe, so the API asks
// PostgreSQL as it did before. The filter only grows (a deleted file's bits stay: a false
// positive, never a false negative). The secondary site does not use it (its API asks its
// replica, which holds the main's files too).
//
// Keys are paths on modules and the ids clients choose, except version 7 UUIDs, which the API
// assigns (ingest.IDInFilter): a registration naming one is checked in the database.
//
// Size: 2^23 words (32 MiB), 5 bits per key: under 1% false positives up to ~16 million keys
// (0.74% at 16 bits per key for 32-bit blocks: 8 to 16 million files); past that more
// registrations fall through to PostgreSQL, never a wrong answer. Changing the size or the
// hashing changes where keys are: rename committedKey then (the new key is built from the
// database).
const (
	committedKey = "ingest:committed:v1"
	filterWords  = 1 << 23
	filterHashes = 5
	// buildLock is held (SET NX, buildLockTTL) by the API replica building the filter.
	buildLock    = "ingest:committed:building"
	buildLockTTL = 10 * time.Minute
)

// filterSlot appends key's word (as BITFIELD's "#N": word N, 1 to filterWords; word 0 is the
// flag's) and its mask of filterHashes bits (a signed 32-bit number, as BITFIELD's i32 and Lua's
// bit library read it) to args.
func filterSlot(args []any, key string) []any {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := fmix64(h.Sum64())
	var mask uint32
	for i := range filterHashes { // bits 0–24 choose the bits of the word, bits 41–63 the word
		mask |= 1 << ((x >> (5 * i)) & 31)
	}
	return append(args, "#"+strconv.FormatUint(1+(x>>41)%filterWords, 10), int64(int32(mask)))
}

// fmix64 is MurmurHash3's finalizer: FNV-1a's low bits depend only on the input's low bits, so
// similar keys (paths differing in a digit) would share words; mixed, every output bit depends
// on every input bit.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// committedProbes are the hold script's filter arguments for a write: the number of probed keys
// e, of keys only learnt l, then e+l (word, mask) pairs, probed keys first.
func committedProbes(args []any, w ingest.Write) []any {
	var probe, learn []any
	for _, it := range w.Items {
		for _, u := range it.Unique {
			if u.Probe && !w.Checked {
				probe = filterSlot(probe, u.Key)
			} else {
				learn = filterSlot(learn, u.Key)
			}
		}
	}
	args = append(args, len(probe)/2, len(learn)/2)
	return append(append(args, probe...), learn...)
}

// filterLua is the filter in Lua, for holdScript and learnScript: filter_set(pa, n) sets the bits
// of the n keys whose (word, mask) pairs start at ARGV[pa] — one BITFIELD_RO reading their words
// and one BITFIELD writing the words that change, per 1,000 — and returns the words as they were.
var filterLua = `
local function filter_set(pa, n)
  local before, b = {}, 0
  for s = 0, n - 1, 1000 do
    local get, g = {'BITFIELD_RO', '` + committedKey + `'}, 2
    for i = pa + 2 * s, pa + 2 * math.min(s + 999, n - 1), 2 do
      get[g + 1], get[g + 2], get[g + 3] = 'GET', 'i32', ARGV[i]
      g = g + 3
    end
    local got = redis.call(unpack(get))
    for j = 1, #got do before[b + j] = got[j] end
    b = b + #got
  end
  local cur, changed, c = {}, {}, 0
  for i = 0, n - 1 do
    local w = ARGV[pa + 2 * i]
    local v = cur[w] or before[i + 1]
    local nv = bit.bor(v, tonumber(ARGV[pa + 2 * i + 1]))
    if nv ~= v then
      if cur[w] == nil then c = c + 1; changed[c] = w end
      cur[w] = nv
    end
  end
  for s = 1, c, 1000 do
    local set, k = {'BITFIELD', '` + committedKey + `'}, 2
    for j = s, math.min(s + 999, c) do
      local w = changed[j]
      set[k + 1], set[k + 2], set[k + 3], set[k + 4] = 'SET', 'i32', w, cur[w]
      k = k + 4
    end
    redis.call(unpack(set))
  end
  return before
end
`

// learnScript sets the keys whose (word, mask) pairs are ARGV[1..2n] in the filter (KEYS[1] is
// committedKey), and its "built" flag too when the last argument is "built".
var learnScript = filterLua + `
filter_set(1, (#ARGV - 1) / 2)
if ARGV[#ARGV] == 'built' then redis.call('SETBIT', KEYS[1], 0, 1) end
return 1
`

// learn sets the keys in the filter (and, with built, its flag) in one script call.
func (b *Buffer) learn(ctx context.Context, keys []string, built bool) error {
	args := make([]any, 0, 2*len(keys)+1)
	for _, k := range keys {
		args = filterSlot(args, k)
	}
	flag := ""
	if built {
		flag = "built"
	}
	if err := b.learnKeys.Run(ctx, b.rdb, []string{committedKey}, append(args, flag)...).Err(); err != nil {
		return fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	return nil
}

// LearnCommitted sets the unique keys of items in the committed filter: a write applied without
// the hold script (a direct write) calls it before it applies.
func (b *Buffer) LearnCommitted(ctx context.Context, items []ingest.Item) error {
	var keys []string
	for _, it := range items {
		for _, u := range it.Unique {
			keys = append(keys, u.Key)
		}
	}
	for start := 0; start < len(keys); start += 10000 {
		if err := b.learn(ctx, keys[start:min(start+10000, len(keys))], false); err != nil {
			return err
		}
	}
	return nil
}

// CommittedSource is where the filter learns committed files from: the main database.
type CommittedSource interface {
	// FileKeys calls fn with every committed file (id, module, path), in pages of at most
	// limit; committedSince, if not zero, restricts them to files committed at or after it.
	FileKeys(ctx context.Context, limit int, committedSince time.Time, fn func([]ingest.FileKey) error) error
	// TakeReplayed removes up to limit of the files a secondary site's replay committed
	// (migration 00031) and calls fn with them in the same transaction: they stay listed if fn
	// fails. It returns how many it took.
	TakeReplayed(ctx context.Context, limit int, fn func([]ingest.FileKey) error) (int, error)
}

// fileKeys are the unique keys of committed files.
func fileKeys(files []ingest.FileKey) []string {
	keys := make([]string, 0, 2*len(files))
	for _, f := range files {
		keys = append(keys, ingest.UniquePath(f.InstrumentModuleID, f.Path))
		if ingest.IDInFilter(f.ID) {
			keys = append(keys, ingest.UniqueFileID(f.ID))
		}
	}
	return keys
}

// CommittedBuilt reports whether the committed filter has been built.
func (b *Buffer) CommittedBuilt(ctx context.Context) (bool, error) {
	v, err := b.rdb.GetBit(ctx, committedKey, 0).Result()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	return v == 1, nil
}

// BuildCommitted builds the committed filter from src unless it is built or another replica is
// building it: every committed file, then again those committed since the build began minus
// buildSlack (a file held by an API of an earlier version, without the filter, and committed
// while the scan passed). It reports whether it built it.
func (b *Buffer) BuildCommitted(ctx context.Context, src CommittedSource) (bool, error) {
	if built, err := b.CommittedBuilt(ctx); err != nil || built {
		return false, err
	}
	ok, err := b.rdb.SetNX(ctx, buildLock, strconv.FormatInt(time.Now().UnixMilli(), 10), buildLockTTL).Result()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	if !ok {
		return false, nil
	}
	defer b.rdb.Del(context.WithoutCancel(ctx), buildLock)
	began := time.Now()
	learnPage := func(files []ingest.FileKey) error { return b.learn(ctx, fileKeys(files), false) }
	if err := src.FileKeys(ctx, 5000, time.Time{}, learnPage); err != nil {
		return false, err
	}
	if err := src.FileKeys(ctx, 5000, began.Add(-buildSlack), learnPage); err != nil {
		return false, err
	}
	if err := b.learn(ctx, nil, true); err != nil {
		return false, err
	}
	return true, nil
}

// buildSlack is how far before a build's start its second pass looks: longer than a worker's
// transaction may take from its rows' committed_at (the statement's now()) to its commit.
const buildSlack = 5 * time.Minute

// TakeReplayed learns the files a secondary site's replay committed since the last call (at most
// 5,000 a transaction, until none are left) and reports how many.
func (b *Buffer) TakeReplayed(ctx context.Context, src CommittedSource) (int, error) {
	total := 0
	for {
		n, err := src.TakeReplayed(ctx, 5000, func(files []ingest.FileKey) error { return b.learn(ctx, fileKeys(files), false) })
		total += n
		if err != nil || n < 5000 {
			return total, err
		}
	}
}

// KeepCommitted keeps the committed filter (the main site's API runs it): built, and learning a
// secondary site's replayed files, every interval until ctx ends; a failure is logged and the
// step retried at the next tick (registrations are checked in the database meanwhile).
func (b *Buffer) KeepCommitted(ctx context.Context, src CommittedSource, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if built, err := b.BuildCommitted(ctx, src); err != nil && ctx.Err() == nil {
			log.Warn("committed filter: build failed; registrations are checked in the database meanwhile", "err", err)
		} else if built {
			log.Info("committed filter: built from the database")
		}
		if _, err := b.TakeReplayed(ctx, src); err != nil && ctx.Err() == nil {
			log.Warn("committed filter: learning a secondary site's replayed files failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdFilterLua is the hold script's committed-filter probe (see holdScript): unchecked(pa, e, l)
// sets the e probed and l learnt keys whose (word, mask) pairs start at ARGV[pa] and answers
// whether a probed key may be taken (all of its bits were set), or the filter is not built (its
// flag, read once per call: nothing clears it while a script runs).
var holdFilterLua = filterLua + `
local built = nil -- the "built" flag, read once per script call (a round holds many writes)
local function unchecked(pa, e, l)
  if e + l == 0 then return false end
  if built == nil then built = redis.call('GETBIT', '` + committedKey + `', 0) == 1 end
  local before = filter_set(pa, e + l)
  if e == 0 then return false end
  if not built then return true end
  for i = 0, e - 1 do
    local m = tonumber(ARGV[pa + 2 * i + 1])
    if bit.band(before[i + 1], m) == m then return true end
  end
  return false
end
`
