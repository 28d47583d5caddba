package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/obsops/obsops/services/ingest"
)

// asynq's Redis layout. holdScript enqueues tasks and reclaimScript takes orphaned ones back by
// writing asynq's keys and its protobuf task message directly, which is asynq's private format,
// not its API: that is why go.mod pins github.com/hibiken/asynq at v0.26.0. Upgrade it only with
// TestHoldEnqueuesLikeAsynq green — it reads the tasks back with asynq's inspector and has its
// server process them.

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
