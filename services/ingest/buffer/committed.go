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
// and id, so that a registration of a new path — nearly every one — is acknowledged without
// asking PostgreSQL whether a committed file has it (issue 23's rule 2 at acknowledgement, at no
// cost to the ingest figures; docs/decisions.md §48).
//
// Key: committedKey, a string of filterBits bits after one byte whose bit 0 says "built" (every
// committed file has been learnt). A unique key (ingest.Unique) sets filterHashes bits, at
// offsets from two FNV-1a hashes of it (double hashing: h1 + i·h2); it "may be taken" when all
// of its bits are set.
//
// Invariant: every committed file's keys are set in the filter before it commits, so a key
// whose bits are not all set is not taken. The hold script sets a write's keys in the call that
// holds it (whatever it answers: extra bits only cost a lookup), so every file this site's buffer
// commits is learnt before its task exists; the direct writes learn theirs before they apply
// (Buffer.LearnCommitted); rows committed before the filter existed are learnt by BuildCommitted,
// and a secondary site's replayed files, which never pass this Redis, by TakeReplayed (migration
// 00031's trigger lists them in ingest_replayed_files). Until built (a new or flushed Redis, a
// deleted key: bit 0 reads 0), the hold script answers "check" to every probe, so the API asks
// PostgreSQL as it did before. The filter only grows (a deleted file's bits stay: a false
// positive, never a false negative). The secondary site does not use it (its API asks its
// replica, which holds the main's files too).
//
// Size: 2^27 bits (16 MiB) and 7 hashes: below 1% false positives up to ~14 million keys (7
// million files: path and id); past that more registrations fall through to PostgreSQL, never a
// wrong answer. Changing the size or the hashes changes the offsets: rename committedKey then
// (the new key is built from the database).
const (
	committedKey = "ingest:committed:v1"
	filterBits   = 1 << 27
	filterHashes = 7
	// filterBase is the offset of the filter's first bit: bit 0 is the "built" flag.
	filterBase = 8
	// buildLock is held (SET NX, buildLockTTL) by the API replica building the filter.
	buildLock    = "ingest:committed:building"
	buildLockTTL = 10 * time.Minute
)

// filterOffsets appends the filterHashes bit offsets of key to dst.
func filterOffsets(dst []int64, key string) []int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h1 := h.Sum64()
	h.Write([]byte{0x5c})
	h2 := h.Sum64() | 1
	for i := uint64(0); i < filterHashes; i++ {
		dst = append(dst, filterBase+int64((h1+i*h2)%filterBits))
	}
	return dst
}

// committedProbes are the hold script's filter arguments for a write: the number of probed keys
// e, of keys only learnt l, then (e+l)·filterHashes offsets, probed keys first.
func committedProbes(args []any, w ingest.Write) []any {
	var probe, learn []int64
	for _, it := range w.Items {
		for _, u := range it.Unique {
			if u.Probe && !w.Checked {
				probe = filterOffsets(probe, u.Key)
			} else {
				learn = filterOffsets(learn, u.Key)
			}
		}
	}
	args = append(args, len(probe)/filterHashes, len(learn)/filterHashes)
	for _, o := range probe {
		args = append(args, o)
	}
	for _, o := range learn {
		args = append(args, o)
	}
	return args
}

// learnScript sets the bits of ARGV's offsets in KEYS[1] (1,000 a BITFIELD), and the "built" flag
// too when the last argument is "built".
const learnScript = `
local n = #ARGV - 1
for s = 1, n, 1000 do
  local cmd = {'BITFIELD', KEYS[1]}
  for j = s, math.min(s + 999, n) do
    cmd[#cmd + 1] = 'SET'; cmd[#cmd + 1] = 'u1'; cmd[#cmd + 1] = ARGV[j]; cmd[#cmd + 1] = 1
  end
  redis.call(unpack(cmd))
end
if ARGV[#ARGV] == 'built' then redis.call('SETBIT', KEYS[1], 0, 1) end
return n
`

// learn sets the keys in the filter (and, with built, its flag) in one script call.
func (b *Buffer) learn(ctx context.Context, keys []string, built bool) error {
	args := make([]any, 0, len(keys)*filterHashes+1)
	var offs []int64
	for _, k := range keys {
		offs = filterOffsets(offs[:0], k)
		for _, o := range offs {
			args = append(args, o)
		}
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
	if len(keys) == 0 {
		return nil
	}
	for start := 0; start < len(keys); start += 5000 {
		if err := b.learn(ctx, keys[start:min(start+5000, len(keys))], false); err != nil {
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
		keys = append(keys, ingest.UniquePath(f.InstrumentModuleID, f.Path), ingest.UniqueFileID(f.ID))
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
// sets the bits of the e probed and l learnt keys whose offsets start at ARGV[pa] and answers
// whether a probed key may be taken (all of its bits were set), or the filter is not built.
var holdFilterLua = `
local function unchecked(pa, e, l)
  local n = (e + l) * ` + strconv.Itoa(filterHashes) + `
  if n == 0 then return false end
  local old, built = {}, false
  for s = 0, n - 1, 1000 do
    local cmd = {'BITFIELD', '` + committedKey + `'}
    if s == 0 then cmd[3] = 'GET'; cmd[4] = 'u1'; cmd[5] = 0 end
    for j = s, math.min(s + 999, n - 1) do
      cmd[#cmd + 1] = 'SET'; cmd[#cmd + 1] = 'u1'; cmd[#cmd + 1] = ARGV[pa + j]; cmd[#cmd + 1] = 1
    end
    local got = redis.call(unpack(cmd))
    local first = 1
    if s == 0 then built = got[1] == 1; first = 2 end
    for j = first, #got do old[#old + 1] = got[j] end
  end
  if e == 0 then return false end
  if not built then return true end
  for i = 0, e - 1 do
    local all = true
    for j = 1, ` + strconv.Itoa(filterHashes) + ` do
      if old[i * ` + strconv.Itoa(filterHashes) + ` + j] == 0 then all = false break end
    end
    if all then return true end
  end
  return false
end
`
