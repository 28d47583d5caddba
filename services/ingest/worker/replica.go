package worker

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/obsops/obsops/services/ingest/buffer"
)

// WatchReplica runs at a secondary site until ctx ends: every interval it reads how far the local
// read replica has replayed the WAL (pg_last_wal_replay_lsn()) and releases from the read cache
// the records of every transaction whose commit the replica now holds (their receipts become
// replicated). While the replica or Redis is unreachable nothing is released, so reads keep
// finding every acknowledged record in the cache.
func WatchReplica(ctx context.Context, replica *sql.DB, buf *buffer.Buffer, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := releaseOnce(ctx, replica, buf)
		switch {
		case err != nil && !warned:
			log.Warn("cannot release replicated records yet", "error", err.Error())
			warned = true
		case err == nil:
			warned = false
			if n > 0 {
				log.Debug("released replicated transactions", "count", n)
			}
		}
	}
}

func releaseOnce(ctx context.Context, replica *sql.DB, buf *buffer.Buffer) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var pos sql.NullString
	if err := replica.QueryRowContext(qctx, `SELECT pg_last_wal_replay_lsn()::text`).Scan(&pos); err != nil {
		return 0, err
	}
	if !pos.Valid {
		return 0, errNotReplica
	}
	n, ok := buffer.ParseLSN(pos.String)
	if !ok {
		return 0, errNotReplica
	}
	return buf.ReleaseReplicated(qctx, n)
}

type notReplica struct{}

func (notReplica) Error() string {
	return "OPS_DATABASE_URL is not a streaming replica (pg_last_wal_replay_lsn() is null)"
}

var errNotReplica error = notReplica{}

// OrphanGrace is how long past its lease's expiry a task is left with its worker before
// ReclaimOrphans takes it back: a live worker extends its leases (30 s) every 5 s, so a lease
// 10 s past its end means 40 s without a heartbeat — a dead worker, or a hand-over lost in a
// crash of Redis — with room for the clocks of the worker hosts to differ by a few seconds.
const OrphanGrace = 10 * time.Second

// WatchOrphans runs until ctx ends: every interval it puts back on the queue the tasks whose
// lease expired OrphanGrace ago (buffer.ReclaimOrphans), so a task orphaned by a crash is applied
// within about a minute instead of asynq's two. Every worker runs it; the reclaim of one task is
// atomic, so two workers never both put it back.
func WatchOrphans(ctx context.Context, buf *buffer.Buffer, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := buf.ReclaimOrphans(ctx, time.Now().Add(-OrphanGrace))
		if err != nil {
			continue // Redis unreachable: the next tick tries again
		}
		if n > 0 {
			log.Warn("put orphaned tasks back on the queue (their worker or its hand-over was lost)", "count", n)
		}
	}
}
