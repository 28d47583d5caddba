package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/obsops/obsops/services/ingest/buffer"
)

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
	every(ctx, interval, func() {
		n, err := buf.ReclaimOrphans(ctx, time.Now().Add(-OrphanGrace))
		if err == nil && n > 0 { // an error (Redis unreachable): the next tick tries again
			log.Warn("put orphaned tasks back on the queue (their worker or its hand-over was lost)", "count", n)
		}
	})
}

// WatchClaims runs until ctx ends: every interval (buffer.ReleaseInterval) it releases the
// claims whose grace has passed (buffer.ReleaseClaims). Every worker runs it; a claim goes only
// while the owner it was released for holds it, so two workers releasing at once agree.
func WatchClaims(ctx context.Context, buf *buffer.Buffer, interval time.Duration) {
	every(ctx, interval, func() {
		_, _ = buf.ReleaseClaims(ctx) // an error (Redis unreachable): the next tick tries again
	})
}
