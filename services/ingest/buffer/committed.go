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
// (ingest.Unique) sets filterHashes bits of one word, both chosen by a hash of it (FNV-1a,
// mixed), and "may be taken" when all of them are set. One word per key keeps a key's bits in
// one cache line; for that, it needs more bits per key than a classic filter for the same false
// positives. The hold script reads a write's words with BITFIELD_RO (committedProbes); the round
// sets the bits with one native BITFIELD (setOps), not from Lua.
//
// Invariant: every committed file's keys are set in the filter before it commits, so a key
// whose bits are not all set is not taken. A round sets its writes' keys in the hold script's
// round trip (setKeys, right after it; whatever it answers: extra bits only cost a lookup), so
// every file this site's buffer commits is learnt before its task can have run (and its claims
// and record cover it until then); the direct writes learn theirs before they apply
// (Buffer.LearnCommitted); rows committed before the filter existed are learnt by BuildCommitted,
// and a secondary site's replayed files, which never pass this Redis, by TakeReplayed (migration
// 00031's trigger lists them in ingest_replayed_files). Until built (a new or flushed Redis, a
// deleted key: the flag reads 0), the script answers "check" to every probe, so the API asks
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

// filterBits is key's place in the filter: its word (1 to filterWords; word 0 holds the flag)
// and its mask of filterHashes bits in that word.
func filterBits(key string) (word uint64, mask uint32) {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := fmix64(h.Sum64())
	for i := range filterHashes { // bits 0–24 choose the bits of the word, bits 41–63 the word
		mask |= 1 << ((x >> (5 * i)) & 31)
	}
	return 1 + (x>>41)%filterWords, mask
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

// setOps appends to a BITFIELD command the operations that set key's filterHashes bits, "SET u1
// offset 1" each. Word w is bits 32w to 32w+31 of the string, the mask's bit b at 32w+31-b
// (BITFIELD counts from the most significant bit: the word is the big-endian i32 at "#w", as the
// filter's first version wrote it from Lua, so a filter it built stays valid). Bit by bit in
// native commands costs Redis about what reading and writing whole words from Lua does (2.8–3.2
// against 2.7–3.05 µs per key; docs/benchmarks.md), needs no script, and setting a bit needs no
// read-modify-write that two API replicas could interleave.
func setOps(cmd []any, key string) []any {
	word, mask := filterBits(key)
	for b := 31; b >= 0; b-- {
		if mask&(1<<b) != 0 {
			cmd = append(cmd, "SET", "u1", 32*word+uint64(31-b), 1)
		}
	}
	return cmd
}

// learnChunk bounds the keys of one BITFIELD command (five operations, twenty arguments each).
const learnChunk = 2000

// learn sets the keys in the filter (and, with built, its flag after them), learnChunk keys per
// command, the commands pipelined.
func (b *Buffer) learn(ctx context.Context, keys []string, built bool) error {
	pipe := b.rdb.Pipeline()
	for s := 0; s < len(keys); s += learnChunk {
		cmd := []any{"BITFIELD", committedKey}
		for _, k := range keys[s:min(s+learnChunk, len(keys))] {
			cmd = setOps(cmd, k)
		}
		pipe.Do(ctx, cmd...)
	}
	if built {
		pipe.SetBit(ctx, committedKey, 0, 1)
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	return nil
}

// committedProbes are the hold script's filter arguments for a write: the number p of keys it
// probes (none for a checked write, or one probeLarge read), then p triples "GET i32 #w" (their words, for one
// BITFIELD_RO the script sends as they are), then their p masks. The script answers "check" for
// the write if one probed key's mask is all set in its word (committed, a replay, or a false
// positive) or the filter is not built; its keys are set by setKeys right after the script, in
// the same round trip.
//
// Between the script and that BITFIELD the claims and held records decide: a write of the same
// path or id held by another request meanwhile meets this write's claim (every file claims its
// path; a path's claim outlives its commit by claimGrace) or its record. The one gap is an id a
// client chose, held by this round, committed and evicted before the BITFIELD that follows in the
// same pipeline (microseconds), while another request holds it again.
func committedProbes(args []any, hw *heldWrite) []any {
	w := hw.w
	if w.Checked || hw.probed {
		return append(args, 0)
	}
	words, masks := probedBits(w)
	args = append(args, len(masks))
	for _, word := range words {
		args = append(args, "GET", "i32", "#"+strconv.FormatUint(word, 10))
	}
	for _, m := range masks {
		args = append(args, int64(int32(m)))
	}
	return args
}

// probedBits are the filter words and masks of the keys write w probes (Unique.Probe), in order.
func probedBits(w ingest.Write) (words []uint64, masks []uint32) {
	for _, it := range w.Items {
		for _, u := range it.Unique {
			if u.Probe {
				word, mask := filterBits(u.Key)
				words, masks = append(words, word), append(masks, mask)
			}
		}
	}
	return words, masks
}

// holdFilterLua is the hold script's committed-filter probe (see holdScript): unchecked(s, e)
// answers whether one of the e probed keys whose "GET i32 #w" triples start at ARGV[s] (their
// masks after them) may be taken — all its bits are set — or the filter is not built (its flag,
// read once per script call: nothing clears it while a script runs). One BITFIELD_RO per 1,000
// keys, its arguments unpacked as they came: no Lua table is built per key.
const holdFilterLua = `
local built = nil
local function unchecked(s, e)
  if built == nil then built = redis.call('GETBIT', '` + committedKey + `', 0) == 1 end
  if not built then return true end
  for c = 0, e - 1, 1000 do
    local n = math.min(1000, e - c)
    local r = redis.call('BITFIELD_RO', '` + committedKey + `', unpack(ARGV, s + 3 * c, s + 3 * (c + n) - 1))
    for i = 1, n do
      local m = tonumber(ARGV[s + 3 * e + c + i - 1])
      if bit.band(r[i], m) == m then return true end
    end
  end
  return false
end
`

// probeLarge reads the committed filter for a write held alone (larger than coalesceItems: a bulk
// registration) before its round: one BITFIELD_RO (read-only: no AOF write, no fsync; the
// flag's bit first, then each probed key's word, GET u32, parsed natively) instead of the
// script's unpacked words, whose Lua arguments cost a 1,000-file bulk ~20 µs of Redis per row;
// the extra round trip is shared by the write's rows. It answers whether it cannot clear the
// write (one probed key has all its bits set, or the filter is not built) and whether it read
// anything (probed: the script then reads nothing). The race it leaves until the
// script runs is the one committedProbes describes, a round trip long instead of microseconds.
func (b *Buffer) probeLarge(ctx context.Context, w ingest.Write) (unchecked, probed bool, err error) {
	if w.Checked {
		return false, false, nil
	}
	words, masks := probedBits(w)
	if len(masks) == 0 {
		return false, false, nil
	}
	cmd := []any{"BITFIELD_RO", committedKey, "GET", "u1", 0}
	for _, word := range words {
		cmd = append(cmd, "GET", "u32", "#"+strconv.FormatUint(word, 10))
	}
	res, err := b.rdb.Do(ctx, cmd...).Int64Slice()
	if err != nil {
		return false, false, err
	}
	if len(res) != 1+len(masks) {
		return false, false, fmt.Errorf("BITFIELD_RO answered %d values for %d", len(res), 1+len(masks))
	}
	if res[0] != 1 {
		return true, true, nil // not built
	}
	for k, m := range masks {
		if uint32(res[1+k])&m == m {
			return true, true, nil
		}
	}
	return false, true, nil
}

// setKeys is the BITFIELD that sets the committed-filter keys of ws, probed or only learnt
// (nil: they have none); the round sends it right after the hold script, in its round trip (one
// AOF fsync for both).
func setKeys(ws []*heldWrite) []any {
	cmd := []any{"BITFIELD", committedKey}
	for _, hw := range ws {
		for _, it := range hw.w.Items {
			for _, u := range it.Unique {
				cmd = setOps(cmd, u.Key)
			}
		}
	}
	if len(cmd) == 2 {
		return nil
	}
	return cmd
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
