package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/ingest"
)

// Receipts: where a buffered transaction is, from its info (written when it is held) and its
// state (attempts, last error, commit).

// receiptIDs are the record ids a receipt lists: the first 100 of its write.
func receiptIDs(items []ingest.Item) []string {
	ids := make([]string, min(len(items), 100))
	for i := range ids {
		ids[i] = items[i].ID
	}
	return ids
}

// txInfo is what a receipt starts from.
type txInfo struct {
	TaskID string    `json:"task"`
	Kind   string    `json:"kind"`
	IDs    []string  `json:"ids,omitempty"`
	At     time.Time `json:"at"`
}

// Receipt tells where a buffered transaction is: committed once the worker recorded its commit,
// else the state of its task in the queue.
func (b *Buffer) Receipt(ctx context.Context, tx string) (ingest.Receipt, error) {
	pipe := b.rdb.Pipeline()
	infoCmd := pipe.Get(ctx, txPrefix+tx)
	stCmd := pipe.HGetAll(ctx, txStatePrefix+tx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	st := stCmd.Val()
	// Every field of the documented shape is present in every receipt: null or [] when unknown.
	r := ingest.Receipt{TransactionID: tx, State: ingest.TxBuffered, RecordIDs: []string{}}
	lastErr := st["last_error"]
	r.Attempts, _ = strconv.Atoi(st["attempts"])
	var info txInfo
	if s, err := infoCmd.Result(); err == nil {
		_ = json.Unmarshal([]byte(s), &info)
		r.Kind = info.Kind
		if info.IDs != nil {
			r.RecordIDs = info.IDs
		}
	} else if len(st) == 0 {
		return ingest.Receipt{}, ingest.ErrNoTransaction
	}
	if at, ok := st["committed_at"]; ok {
		t, _ := time.Parse(time.RFC3339Nano, at)
		r.State, r.CommittedAt, r.CommitLSN = ingest.TxCommitted, &t, ingest.Optional(st["lsn"])
		if _, ok := st["replicated_at"]; ok {
			r.State = ingest.TxReplicated // secondary site: this site's replica has the commit
		}
		r.LastError = ingest.Optional(lastErr)
		return r, nil
	}
	ti, err := b.insp.GetTaskInfo(ingest.Queue, info.TaskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		r.State = ingest.TxDead
		if lastErr == "" {
			lastErr = "the task is no longer buffered and its commit was not recorded"
		}
		r.LastError = ingest.Optional(lastErr)
		return r, nil
	case err != nil:
		return ingest.Receipt{}, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	switch ti.State {
	case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateAggregating:
		r.State = ingest.TxBuffered
	case asynq.TaskStateActive:
		r.State = ingest.TxApplying
	case asynq.TaskStateRetry:
		r.State = ingest.TxRetrying
	case asynq.TaskStateArchived:
		r.State = ingest.TxDead
	case asynq.TaskStateCompleted:
		r.State = ingest.TxCommitted
	}
	if lastErr == "" {
		lastErr = ti.LastErr
	}
	r.LastError = ingest.Optional(lastErr)
	return r, nil
}

// RecordFailure notes a failed attempt in the receipts of the transactions, in one round trip.
func (b *Buffer) RecordFailure(ctx context.Context, err error, txs ...string) {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	pipe := b.rdb.Pipeline()
	for _, tx := range txs {
		st := txStatePrefix + tx
		pipe.HIncrBy(ctx, st, "attempts", 1)
		pipe.HSet(ctx, st, "last_error", msg)
		pipe.PExpire(ctx, st, txTTL)
	}
	_, _ = pipe.Exec(ctx)
}

// queueCommit adds to pipe the receipt of a commit of tx: commit time, WAL position, one more
// attempt.
func queueCommit(ctx context.Context, pipe redis.Pipeliner, tx, lsn string, committedAt time.Time) {
	st := txStatePrefix + tx
	pipe.HSet(ctx, st, "committed_at", committedAt.UTC().Format(time.RFC3339Nano), "lsn", lsn)
	pipe.HIncrBy(ctx, st, "attempts", 1)
	pipe.PExpire(ctx, st, txTTL)
}

// queueLastApply adds to pipe the time of the last commit, for /buffer-stats (once per pipeline
// of commits).
func queueLastApply(ctx context.Context, pipe redis.Pipeliner, committedAt time.Time) {
	pipe.Set(ctx, contract.IngestLastApplyKey, strconv.FormatInt(committedAt.UnixMilli(), 10), 0)
}

// RecordDirect records the receipt of a write applied without buffering (committed at once);
// best effort: the write is in the database whatever Redis says.
func (b *Buffer) RecordDirect(ctx context.Context, w ingest.Write, lsn string, committedAt time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	info, _ := json.Marshal(txInfo{TaskID: w.TaskID, Kind: ingest.KindOf(w.TaskType), IDs: receiptIDs(w.Items), At: committedAt})
	st := txStatePrefix + w.Tx
	pipe := b.rdb.Pipeline()
	pipe.Set(ctx, txPrefix+w.Tx, info, txTTL)
	pipe.HSet(ctx, st, "committed_at", committedAt.UTC().Format(time.RFC3339Nano), "lsn", lsn, "attempts", 1)
	pipe.PExpire(ctx, st, txTTL)
	_, _ = pipe.Exec(ctx)
}

// CommittedTxs reports which of the transactions have committed in the main database (their
// records may still be cached at a secondary site, waiting for the replica).
func (b *Buffer) CommittedTxs(ctx context.Context, txs ...string) (map[string]bool, error) {
	out := make(map[string]bool, len(txs))
	if len(txs) == 0 {
		return out, nil
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(txs))
	for i, tx := range txs {
		cmds[i] = pipe.HExists(ctx, txStatePrefix+tx, "committed_at")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	for i, c := range cmds {
		if c.Val() {
			out[txs[i]] = true
		}
	}
	return out, nil
}

// txStatesScript answers, per transaction (ARGV[2..]), 'c' if its commit is recorded, 'd' and
// the error if it is dead — its task archived (a dead letter), or gone from the queue with no
// commit recorded (as Receipt says) — else 'b'; ARGV[1] is the queue. One step, so a task that
// completes meanwhile reads committed, never dead.
const txStatesScript = `
local out = {}
for i = 2, #ARGV do
  local tx = ARGV[i]
  local st = 'ingest:txstate:' .. tx
  if redis.call('HEXISTS', st, 'committed_at') == 1 then
    out[#out + 1] = {'c', ''}
  else
    local ok, d = pcall(cjson.decode, redis.call('GET', 'ingest:tx:' .. tx) or '')
    local state = 'unknown'
    if ok and type(d) == 'table' and type(d.task) == 'string' then
      state = redis.call('HGET', 'asynq:{' .. ARGV[1] .. '}:t:' .. d.task, 'state') or 'gone'
    end
    if state == 'archived' or state == 'gone' then
      local e = redis.call('HGET', st, 'last_error')
      if not e or e == '' then
        e = state == 'gone' and 'the task is no longer buffered and its commit was not recorded' or 'a dead letter'
      end
      out[#out + 1] = {'d', e}
    else
      out[#out + 1] = {'b', ''}
    end
  end
end
return out
`

// TxStates reports, in one round trip, which transactions have committed and which are dead
// (their task archived as a dead letter, or gone without a commit), with the error the receipt
// shows; transactions still buffered or being applied are absent.
func (b *Buffer) TxStates(ctx context.Context, txs ...string) (map[string]ingest.TxState, error) {
	out := make(map[string]ingest.TxState, len(txs))
	if len(txs) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(txs)+1)
	args = append(args, ingest.Queue)
	for _, tx := range txs {
		args = append(args, tx)
	}
	res, err := b.txStates.Run(ctx, b.rdb, nil, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ingest.ErrBufferUnavailable, err)
	}
	for i, r := range res {
		o, _ := r.([]any)
		if i >= len(txs) || len(o) != 2 {
			continue
		}
		kind, _ := o[0].(string)
		msg, _ := o[1].(string)
		switch kind {
		case "c":
			out[txs[i]] = ingest.TxState{Committed: true}
		case "d":
			out[txs[i]] = ingest.TxState{Dead: true, LastError: msg}
		}
	}
	return out, nil
}
