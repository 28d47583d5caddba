package buffer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// The committed filter: a Bloom filter of every committed file's path (on its module) and of the
// ids clients choose, so that a registration of a new path — nearly every one — is acknowledged
// without asking PostgreSQL whether a committed file has it (issue 23's rule 2 at
// acknowledgement without a query; docs/decisions.md §49).
//
// Each main-site API process keeps its own copy in memory (Filter, 32 MiB) and asks it before it
// holds a write (Buffer.Hold): no Redis command and no byte of the append-only file per key. The
// copies learn from one Redis stream, committedLog: the worker appends the keys of the files it
// committed first in the MULTI that takes their records out of the buffer and begins their
// claims' grace (Buffer.Evict), a direct write
// (buffering disabled) before it applies (Buffer.LearnCommitted), and the API the files a
// secondary site's replay committed (TakeReplayed: migration 00031's trigger lists them). Each
// API builds its copy from the database at start (buildCommitted) and then follows the stream
// (KeepCommitted).
//
// Why a key not in the filter is not taken: a file claims its path while buffered and for
// claimGrace (30 s) after its commit's keys were appended to the stream; the filter is trusted
// only while its process has read the stream within freshFor (5 s) — a read sent at time r
// returns every entry appended before r. So when a path's claim is gone, every trusted copy has
// its key; while it is there, the hold script refuses the path to another file. Until a copy is
// built, or when it has not read the stream for freshFor, every write's keys "may be taken"
// (ingest.ErrUnchecked): the API asks PostgreSQL as it did before the filter. The filter only
// grows (a deleted file's bits stay: a false positive, never a false negative).
//
// Keys are paths on modules and the ids clients choose, except version 7 UUIDs, which the API
// assigns (ingest.IDInFilter): a registration naming one is checked in the database. A client's
// own id has no claim: one reused with other content in the moment between its commit's
// eviction and this process reading the stream (normally under a millisecond; at most freshFor)
// is acknowledged and kept aside by the worker as a collision, like the same id held at two
// sites at once.
//
// Size: 2^23 words of 32 bits (32 MiB), 5 bits per key in one word (a blocked Bloom filter: a
// key's bits share a cache line): under 1% false positives up to ~16 million keys (0.71%
// measured at 16 million); past that more registrations fall through to PostgreSQL
// (obsops_ingest_committed_checks_total{by="database"} grows), never a wrong answer.
const (
	filterWords  = 1 << 23
	filterHashes = 5
	// committedLog is the stream of committed keys: entries of one field, "k", the keys' 64-bit
	// hashes (filterHash) big-endian, one after another.
	committedLog = "ingest:committed:log"
	// committedLogKeep is how long an entry stays in committedLog (trimmed by MINID when the
	// next is appended, by the appender's clock): past rebuildAfter, so that a process that
	// lost the stream for less than rebuildAfter finds every entry it missed, with a minute to
	// spare for clocks apart.
	committedLogKeep = 2 * time.Minute
	// freshFor is how long after its last read of the stream a copy is trusted; well inside
	// claimGrace, the time a committed path stays claimed after its keys were appended.
	freshFor = 5 * time.Second
	// rebuildAfter: a copy that could not read the stream for this long may have missed
	// entries trimmed meanwhile, and is built again from the database.
	rebuildAfter = 30 * time.Second
)

// Filter is this process's copy of the committed filter. Holds read it while KeepCommitted
// sets bits (atomic loads and ORs of whole words).
type Filter struct {
	words []uint32
	built atomic.Bool
	// epoch is when the filter was made; readAt is when (since epoch, monotonic) the last read
	// of committedLog that returned everything appended before it was sent.
	epoch  time.Time
	readAt atomic.Int64
}

// newFilter is an empty filter, not built and never read.
func newFilter() *Filter {
	f := &Filter{words: make([]uint32, filterWords), epoch: time.Now()}
	f.unread()
	return f
}

// unread marks the stream as not read since the filter was (re)built: a build is trusted only
// after a read from the position it started at, not for the first freshFor after its epoch.
func (f *Filter) unread() { f.read(f.epoch.Add(-time.Hour)) }

// filterHash is key's 64-bit hash: FNV-1a (hash/fnv's New64a, written out so that hashing a
// key allocates nothing) mixed by MurmurHash3's finalizer (FNV-1a's low bits alone put similar
// paths in the same words: 1% false positives at 300,000 keys).
func filterHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return fmix64(h)
}

// fmix64 is MurmurHash3's finalizer: every output bit depends on every input bit.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// filterBits is a hash's place in the filter: its word and its mask of filterHashes bits there
// (bits 0–24 of the hash choose the bits, bits 41–63 the word).
func filterBits(x uint64) (word uint64, mask uint32) {
	for i := range filterHashes {
		mask |= 1 << ((x >> (5 * i)) & 31)
	}
	return (x >> 41) % filterWords, mask
}

// add sets a hash's bits.
func (f *Filter) add(x uint64) {
	w, m := filterBits(x)
	atomic.OrUint32(&f.words[w], m)
}

// has reports whether every bit of key is set: committed, or a false positive.
func (f *Filter) has(key string) bool {
	w, m := filterBits(filterHash(key))
	return atomic.LoadUint32(&f.words[w])&m == m
}

// trusted reports whether the filter is built and has read the stream within freshFor.
func (f *Filter) trusted() bool {
	return f.built.Load() && time.Since(f.epoch)-time.Duration(f.readAt.Load()) <= freshFor
}

// read notes a read of committedLog sent at sent that returned every entry before it.
func (f *Filter) read(sent time.Time) { f.readAt.Store(int64(sent.Sub(f.epoch))) }

// mayBeCommitted reports whether a committed file may hold one of w's unique keys: one is in
// the filter, or w has some and the filter is not trusted (or not kept by this process).
func (b *Buffer) mayBeCommitted(w ingest.Write) bool {
	f := b.committed.Load()
	trusted := f != nil && f.trusted()
	for _, it := range w.Items {
		for _, k := range it.Unique {
			if !trusted || f.has(k) {
				return true
			}
		}
	}
	return false
}

// CommittedReady reports whether this process's committed filter rules out committed keys
// (built and following the stream); until then every registration is checked in the database.
func (b *Buffer) CommittedReady() bool {
	f := b.committed.Load()
	return f != nil && f.trusted()
}

// learnChunk bounds the keys of one stream entry (8 bytes each).
const learnChunk = 10000

// learn appends keys to committedLog in a round trip of its own (queueLearn).
func (b *Buffer) learn(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := b.rdb.Pipeline()
	queueLearn(ctx, pipe, keys)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: committed filter: %v", ingest.ErrBufferUnavailable, err)
	}
	return nil
}

// queueLearn adds to pipe the appending of keys to committedLog, learnChunk per entry, trimming
// entries older than committedLogKeep.
func queueLearn(ctx context.Context, pipe redis.Pipeliner, keys []string) {
	minID := strconv.FormatInt(time.Now().Add(-committedLogKeep).UnixMilli(), 10)
	for s := 0; s < len(keys); s += learnChunk {
		part := keys[s:min(s+learnChunk, len(keys))]
		buf := make([]byte, 8*len(part))
		for i, k := range part {
			binary.BigEndian.PutUint64(buf[8*i:], filterHash(k))
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: committedLog, MinID: minID, Approx: true, Values: []any{"k", buf}})
	}
}

// uniqueKeys are the unique keys of items.
func uniqueKeys(items []ingest.Item) []string {
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Unique...)
	}
	return keys
}

// LearnCommitted appends the unique keys of items to the committed filter's stream: a write
// applied without the hold script (a direct write) calls it before it applies.
func (b *Buffer) LearnCommitted(ctx context.Context, items []ingest.Item) error {
	return b.learn(ctx, uniqueKeys(items))
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

// buildCommitted learns every committed file into f from src, then again those committed since
// the build began minus buildSlack (a file committed while the scan passed by a worker of an
// earlier version, which does not append to the stream). It answers the stream position to
// follow from: read before the scan, so that a file committed after it is either seen by the
// scan or appended after that position.
func (b *Buffer) buildCommitted(ctx context.Context, src CommittedSource, f *Filter) (string, error) {
	pos := "0-0"
	last, err := b.rdb.XRevRangeN(ctx, committedLog, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	if len(last) == 1 {
		pos = last[0].ID
	}
	began := time.Now()
	learnPage := func(files []ingest.FileKey) error {
		for _, k := range fileKeys(files) {
			f.add(filterHash(k))
		}
		return nil
	}
	if err := src.FileKeys(ctx, 5000, time.Time{}, learnPage); err != nil {
		return "", err
	}
	if err := src.FileKeys(ctx, 5000, began.Add(-buildSlack), learnPage); err != nil {
		return "", err
	}
	return pos, nil
}

// buildSlack is how far before a build's start its second pass looks: longer than a worker's
// transaction may take from its rows' committed_at (the statement's now()) to its commit.
const buildSlack = 5 * time.Minute

// readCommitted reads committedLog after pos into f (up to 1,000 entries, waiting up to block
// for the first) and answers the new position. A read that returned fewer than it could marks
// f read as of its sending.
func (b *Buffer) readCommitted(ctx context.Context, f *Filter, pos string, block time.Duration) (string, error) {
	sent := time.Now()
	const count = 1000
	res, err := b.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{committedLog, pos}, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		f.read(sent)
		return pos, nil
	}
	if err != nil {
		return pos, err
	}
	n := 0
	for _, s := range res {
		for _, m := range s.Messages {
			n++
			pos = m.ID
			k, _ := m.Values["k"].(string)
			for i := 0; i+8 <= len(k); i += 8 {
				f.add(binary.BigEndian.Uint64([]byte(k[i : i+8])))
			}
		}
	}
	if n < count {
		f.read(sent)
	}
	return pos, nil
}

// TakeReplayed appends the files a secondary site's replay committed since the last call to the
// stream (at most 5,000 a transaction, until none are left) and reports how many.
func (b *Buffer) TakeReplayed(ctx context.Context, src CommittedSource) (int, error) {
	total := 0
	for {
		n, err := src.TakeReplayed(ctx, 5000, func(files []ingest.FileKey) error { return b.learn(ctx, fileKeys(files)) })
		total += n
		if err != nil || n < 5000 {
			return total, err
		}
	}
}

// KeepCommitted keeps this process's committed filter (the main site's API runs it until ctx
// ends): built from src, then following the stream, built again after losing it for
// rebuildAfter; every interval it also appends a secondary site's replayed files to the stream.
// A failure is logged and retried (registrations are checked in the database meanwhile).
func (b *Buffer) KeepCommitted(ctx context.Context, src CommittedSource, interval time.Duration, log *slog.Logger) {
	f := b.committed.Load()
	if f == nil {
		f = newFilter()
		b.committed.Store(f)
	}
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
			return true
		}
	}
	for ctx.Err() == nil {
		f.built.Store(false)
		f.unread()
		pos, err := b.buildCommitted(ctx, src, f)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("committed filter: build failed; registrations are checked in the database meanwhile", "err", err)
			}
			if !pause() {
				return
			}
			continue
		}
		f.built.Store(true)
		log.Info("committed filter: built from the database")
		lastRead, nextReplayed := time.Now(), time.Time{}
		for ctx.Err() == nil {
			if time.Now().After(nextReplayed) {
				if _, err := b.TakeReplayed(ctx, src); err != nil && ctx.Err() == nil {
					log.Warn("committed filter: learning a secondary site's replayed files failed", "err", err)
				}
				nextReplayed = time.Now().Add(interval)
			}
			next, err := b.readCommitted(ctx, f, pos, interval)
			if err == nil {
				pos, lastRead = next, time.Now()
				continue
			}
			if ctx.Err() != nil {
				return
			}
			if time.Since(lastRead) > rebuildAfter {
				log.Warn("committed filter: the stream was unreadable too long; building again", "err", err)
				break
			}
			if !pause() {
				return
			}
		}
	}
}
