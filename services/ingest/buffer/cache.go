package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// The read cache: buffered records by kind and id, with the index sets of the smart reads.

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

// ClaimOwners returns the owner of each of keys held in the claims hash (ingest.Claim), in one
// HMGET per 1,000 keys; keys nobody holds are absent.
func (b *Buffer) ClaimOwners(ctx context.Context, keys ...string) (map[string]string, error) {
	out := map[string]string{}
	for start := 0; start < len(keys); start += 1000 {
		end := min(start+1000, len(keys))
		vals, err := b.rdb.HMGet(ctx, claimsKey, keys[start:end]...).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		for i, v := range vals {
			if o, ok := v.(string); ok {
				out[keys[start+i]] = o
			}
		}
	}
	return out, nil
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
// receipt, in one round trip; called by the worker after its transaction committed. The
// records of every write applied are removed together (one release batch of claims, one HDEL
// per kind): a task of a round holds many single-file writes, and a removal per write cost
// Redis four commands and a script call per registration (make bench). It is one MULTI whose
// first command appends the records' unique keys to the committed filter's stream
// (committed.go): their claims' grace begins with the stream entry that lets every API learn
// them, or nothing happens (a MULTI refused, e.g. Redis out of memory, runs none of it). The
// append was a round trip of its own: with appendfsync always, one more fsync per worker round,
// which every held write waits behind (docs/decisions.md §50).
func (b *Buffer) Evict(ctx context.Context, applied []Applied, lsn string, committedAt time.Time) error {
	n := 0
	for _, a := range applied {
		n += len(a.Items)
	}
	items := make([]ingest.Item, 0, n)
	for _, a := range applied {
		items = append(items, a.Items...)
	}
	pipe := b.rdb.TxPipeline()
	queueLearn(ctx, pipe, uniqueKeys(items))
	for _, a := range applied {
		queueCommit(ctx, pipe, a.Tx, lsn, committedAt)
	}
	queueRemoval(ctx, pipe, items)
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

// claimGrace is how long a claim outlives its records in the cache. The API checks the database
// before it holds a write, and the hold script checks the claims: a claim released the moment its
// rows committed would leave a request that read the database just before that commit and holds
// just after it seeing neither (a package acknowledged for a file just packaged, then kept aside
// by the worker as a collision — TestIntegrityRandomized found it). A request holds within its
// deadline (OPS_INGEST_REDIS_TIMEOUT, 1 s, after checks of a few ms); 30 s covers a stalled one
// many times over, at about 100 bytes per claim released in the last 30 s.
const claimGrace = 30 * time.Second

// ReleaseInterval is how often the worker releases the claims whose grace has passed
// (ReleaseClaims), so a claim outlives its records by claimGrace and at most this much more. Once
// a second rather than in every eviction: a call's fixed cost (~75 µs of Redis beyond a plain
// write's) was paid per worker round (docs/decisions.md §50).
const ReleaseInterval = time.Second

// releaseLimit is the most release batches (members of claimsRelease) one releaseClaimsScript
// call releases; ReleaseClaims calls it again while that many were due.
const releaseLimit = 100

// ReleaseClaims releases the claims whose grace has passed, releaseLimit batches per script
// call, until fewer are due; it returns how many batches it released. Safe to run in several
// processes at once: each claim goes only while the owner it was released for still holds it.
func (b *Buffer) ReleaseClaims(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := b.releaseClaims.Run(ctx, b.rdb, []string{claimsRelease, claimsKey}, time.Now().UnixMilli(), releaseLimit).Int()
		if err != nil {
			return total, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
		}
		total += n
		if n < releaseLimit {
			return total, nil
		}
	}
}

// releaseClaimsScript releases the claims whose grace has passed (at most ARGV[2] members of
// claimsRelease a call): each only if its owner still holds it, 1,000 claims per HMGET and HDEL.
// A member is a batch id whose claims are the JSON [[key, owner], …] at claimsBatchPrefix+id
// (queueRemoval), or "<key>\0<owner>", one claim (as earlier versions wrote them).
// KEYS: claimsRelease, claimsKey. ARGV: now (unix ms), the most members to release.
const releaseClaimsScript = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local ks, os = {}, {}
local function release()
  for s = 1, #ks, 1000 do
    local e = math.min(s + 999, #ks)
    local cur = redis.call('HMGET', KEYS[2], unpack(ks, s, e))
    local del = {}
    for j = 1, #cur do
      if cur[j] == os[s + j - 1] then del[#del + 1] = ks[s + j - 1] end
    end
    if #del > 0 then redis.call('HDEL', KEYS[2], unpack(del)) end
  end
  ks, os = {}, {}
end
for _, m in ipairs(due) do
  local i = string.find(m, '\0', 1, true)
  if i then
    ks[#ks + 1], os[#os + 1] = string.sub(m, 1, i - 1), string.sub(m, i + 1)
  else
    local b = redis.call('GET', '` + claimsBatchPrefix + `' .. m)
    if b then
      for _, p in ipairs(cjson.decode(b)) do ks[#ks + 1], os[#os + 1] = p[1], p[2] end
      redis.call('DEL', '` + claimsBatchPrefix + `' .. m)
    end
  end
  if #ks >= 5000 then release() end
end
release()
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return #due
`

// queueRemoval adds to pipe the removal of items' cached records and index entries (one HDEL per
// kind and 1,000 records), and the release of their claims after claimGrace (their rows,
// committed, now hold the rule in the database): one batch of them, one member of claimsRelease,
// released by ReleaseClaims. (A member per claim cost a sorted-set insert per registered file,
// the largest part of a bulk registration's Redis work.)
func queueRemoval(ctx context.Context, pipe redis.Pipeliner, items []ingest.Item) {
	byKind := map[string][]string{}
	var claims [][2]string
	for _, it := range items {
		byKind[it.Kind] = append(byKind[it.Kind], it.ID)
		if it.Index != "" {
			pipe.SRem(ctx, it.Index, it.ID)
		}
		for _, c := range it.Claims {
			claims = append(claims, [2]string{c.Key, c.Owner})
		}
	}
	if len(claims) > 0 {
		batch, _ := json.Marshal(claims) // strings only: cannot fail
		id := ingest.NewID()
		pipe.Set(ctx, claimsBatchPrefix+id, batch, 0)
		pipe.ZAdd(ctx, claimsRelease, redis.Z{Score: float64(time.Now().Add(claimGrace).UnixMilli()), Member: id})
	}
	for kind, ids := range byKind {
		for start := 0; start < len(ids); start += 1000 {
			pipe.HDel(ctx, recHash(kind), ids[start:min(start+1000, len(ids))]...)
		}
	}
}
