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
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/groupcommit"
	"github.com/obsops/obsops/services/ingest"
)

// Redis keys (all under "ingest:").
const (
	recPrefix         = "ingest:rec:"           // + kind → hash: id → "<hash>|<tx>|<record json>"
	ouIndexPrefix     = "ingest:ou:"            // + obs unit id → set of buffered executed obs unit ids
	pkgIndexPrefix    = "ingest:pkgfiles:"      // + package id → set of buffered file ids naming it
	txPrefix          = "ingest:tx:"            // + tx → JSON txInfo
	claimsKey         = "ingest:claims"         // hash: claim key → owner (ingest.Claim; holdScript names it too)
	claimsRelease     = "ingest:claims:release" // sorted set: claim batch id by when its claims may be released
	claimsBatchPrefix = "ingest:claims:batch:"  // + batch id → JSON [[claim key, owner], …] (queueRemoval)
	txStatePrefix     = "ingest:txstate:"       // + tx → hash: attempts, last_error, committed_at, lsn
	idemPrefix        = "ingest:idem:"          // + user id + ":" + key digest → JSON idemEntry
	idemCountPrefix   = "ingest:idemcount:"     // + user id → sorted set: key digest by expiry (unix ms)
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
	fence   *redis.Script // fence.go
	seal    *redis.Script
	release *redis.Script
	// releaseClaims releases the claims whose grace has passed (cache.go)
	releaseClaims *redis.Script
	// txStates reads the states of transactions for the reads (receipts.go)
	txStates  *redis.Script
	beginIdem *redis.Script // idempotency.go
	rounds    groupcommit.Group[holdRound]
	// committed is this process's copy of the committed filter (committed.go), kept by
	// KeepCommitted; nil where it does not run (workers, a secondary site's API).
	committed atomic.Pointer[Filter]

	// MaxIdempotencyPerUser is the most unexpired Idempotency-Key entries one user (every
	// credential of theirs) may hold (OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL); 0: no limit.
	// Set it before first use.
	MaxIdempotencyPerUser int
}

// New returns the buffer on rdb; timeout bounds each Redis round trip of a write.
func New(rdb redis.UniversalClient, timeout time.Duration) *Buffer {
	return &Buffer{
		rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		timeout: timeout, hold: redis.NewScript(holdScript), reclaim: redis.NewScript(reclaimScript),
		fence: redis.NewScript(fenceScript), seal: redis.NewScript(sealScript), release: redis.NewScript(releaseScript),
		releaseClaims: redis.NewScript(releaseClaimsScript),
		txStates:      redis.NewScript(txStatesScript), beginIdem: redis.NewScript(beginIdemScript),
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
