package planner

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// publisher folds the counters and publishes an overview update whenever the counts changed,
// at most once per interval: the one source of seq numbers and of update messages.
type publisher struct {
	store *postgres.Store
	redis *redis.Client
	log   *slog.Logger
	last  *transfer.Overview
}

func (pub *publisher) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := pub.once(ctx); err != nil && ctx.Err() == nil {
			pub.log.Warn("overview publisher", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (pub *publisher) once(ctx context.Context) error {
	if err := pub.store.FoldCounters(ctx); err != nil {
		return err
	}
	counts, err := pub.store.Counters(ctx)
	if err != nil {
		return err
	}
	o := transfer.BuildOverview(counts, 0, time.Now())
	if pub.last != nil && pub.last.SameCounts(o) {
		return nil
	}
	if o.Seq, err = pub.store.NextSeq(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(transfer.Message{Type: "update", Overview: o})
	if err != nil {
		return err
	}
	if err := pub.redis.Publish(ctx, transfer.OverviewChannel, b).Err(); err != nil {
		return err
	}
	pub.last = o
	return nil
}
