package buffer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/obsops/obsops/services/ingest"
)

// Obs-unit fences (docs/decisions.md, "Deleting obs units: a fence in the ingest buffer"): a key
// per obs unit that holdScript checks before holding a start (Write.Fences). Its value is
// "fence:<token>" while a catalog delete is deciding (expires after ingest.FenceTTL) and
// "deleted:<token>" once it deleted the obs unit (no expiry: obs unit ids are never reused, and
// an API process may remember an obs unit as existing for as long as it runs).

const ouFencePrefix = "ingest:fence:ou:" // + obs unit id → "fence:<token>" or "deleted:<token>"

// OUFence is the fence key of obs unit id.
func OUFence(obsUnitID int64) string { return ouFencePrefix + strconv.FormatInt(obsUnitID, 10) }

// OUFence is OUFence, for the use cases (ingest.Buffer).
func (*Buffer) OUFence(obsUnitID int64) string { return OUFence(obsUnitID) }

// fenceScript fences obs units and answers their buffered executions, in one step: a start held
// before it is in an index it reads, a start held after it is refused by holdScript.
// KEYS: per obs unit its fence key, then its index. ARGV: value, TTL ms. Replies per obs unit
// the members of its index.
const fenceScript = `
local out = {}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  out[#out + 1] = redis.call('SMEMBERS', KEYS[i + 1])
end
return out
`

// sealScript turns a delete's fences into tombstones, only if every one is still its own.
// KEYS: fence keys. ARGV: the fence value, the tombstone value. Replies 1, or 0 (nothing changed).
const sealScript = `
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[2]) end
return 1
`

// releaseScript removes a delete's own fences and tombstones (another delete's stay).
// KEYS: fence keys. ARGV: the fence value, the tombstone value.
const releaseScript = `
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[1] or v == ARGV[2] then redis.call('DEL', KEYS[i]) end
end
return 1
`

func fenceKeys(ids []int64) []string {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = OUFence(id)
	}
	return keys
}

// FenceObsUnits fences the obs units for the delete token (ingest.FenceTTL) and returns their
// buffered executions by obs unit.
func (b *Buffer) FenceObsUnits(ctx context.Context, token string, ids []int64) (map[int64][]string, error) {
	keys := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		keys = append(keys, OUFence(id), OUIndex(id))
	}
	res, err := b.fence.Run(ctx, b.rdb, keys, ingest.FenceValue(token), ingest.FenceTTL.Milliseconds()).Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	out := map[int64][]string{}
	for i, r := range res {
		members, _ := r.([]any)
		for _, m := range members {
			if s, ok := m.(string); ok && i < len(ids) {
				out[ids[i]] = append(out[ids[i]], s)
			}
		}
	}
	return out, nil
}

// SealObsUnits turns the delete's fences into tombstones; ingest.ErrFenceLost when one of them
// is no longer its own (expired, or taken by another delete): nothing is changed then.
func (b *Buffer) SealObsUnits(ctx context.Context, token string, ids []int64) error {
	ok, err := b.seal.Run(ctx, b.rdb, fenceKeys(ids), ingest.FenceValue(token), ingest.TombstoneValue(token)).Int()
	if err != nil {
		return fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	if ok != 1 {
		return ingest.ErrFenceLost
	}
	return nil
}

// ReleaseObsUnits removes the delete's own fences and tombstones.
func (b *Buffer) ReleaseObsUnits(ctx context.Context, token string, ids []int64) error {
	if err := b.release.Run(ctx, b.rdb, fenceKeys(ids), ingest.FenceValue(token), ingest.TombstoneValue(token)).Err(); err != nil {
		return fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	return nil
}
