package planner

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeChannel wakes the active planner early (a mover completed an operation, an admin reset
// one; ingest may publish here when it finalizes a package). The poll every
// OPS_PLANNER_INTERVAL is the guarantee; a lost wake-up only delays.
const WakeChannel = "ops:transfer:planner"

// Waker asks the active planner (at whichever replica) for a round soon, on behalf of this
// replica's requests. Wake never waits: the request that completed an operation does not pay a
// Redis round trip, and however many requests ask, a replica publishes at most one wake-up per
// wakeGap (a planner round after the last wake-up sees every change committed before it, so the
// wake-ups in between would add nothing; the planner itself runs at most every minRoundGap).
type Waker struct {
	Redis *redis.Client
	asked chan struct{}
}

// wakeGap is the least time between two wake-ups a replica publishes.
const wakeGap = 100 * time.Millisecond

// NewWaker returns a waker; Run sends its wake-ups.
func NewWaker(rdb *redis.Client) *Waker {
	return &Waker{Redis: rdb, asked: make(chan struct{}, 1)}
}

// Wake asks for a planner round without waiting.
func (w *Waker) Wake() {
	select {
	case w.asked <- struct{}{}:
	default: // one is queued already
	}
}

// Run publishes the wake-ups until ctx ends. A lost one only delays the planner until its next
// OPS_PLANNER_INTERVAL poll.
func (w *Waker) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.asked:
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_ = w.Redis.Publish(pctx, WakeChannel, "1").Err()
			cancel()
			select { // requests asking meanwhile wait for the next one
			case <-ctx.Done():
				return
			case <-time.After(wakeGap):
			}
		}
	}
}
