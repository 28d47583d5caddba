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
	warned := false
	every(ctx, interval, func() {
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
	})
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
