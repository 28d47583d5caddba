package database

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// MainReportKey is where a secondary site's ingest publishes its view of the main database in the
// site's Redis (MainReport), for the site service, which does not connect to the main itself
// (decisions §45). Under ingest:stats:, which the site service's Redis user may read.
const MainReportKey = "ingest:stats:main"

// MainReportInterval is how often ingest publishes the report; MainReportTTL how long one stays
// (a report older than that, or none, means ingest cannot say: the main counts as unreachable).
const (
	MainReportInterval = time.Second
	MainReportTTL      = 5 * time.Second
)

// MainReport is a secondary's ingest's view of the main database: its link's state, and the main's
// WAL position when it answered (for the replica's distance behind the main).
type MainReport struct {
	Status MainStatus `json:"status"`
	// WALLSN is pg_current_wal_lsn() at the main, read at At; empty when it could not be read.
	WALLSN string    `json:"wal_lsn,omitempty"`
	At     time.Time `json:"at"`
}

// PublishMainReport publishes the report of pools (a secondary's: Main probed, Write the main) at
// MainReportKey every MainReportInterval until ctx ends. The WAL position is asked with a short
// bound, so a WAN that drops traffic delays no report of the link's state.
func PublishMainReport(ctx context.Context, rdb redis.Cmdable, pools *Pools) {
	t := time.NewTicker(MainReportInterval)
	defer t.Stop()
	for {
		r := MainReport{Status: pools.Main.Status(), At: time.Now().UTC()}
		if r.Status.Reachable {
			qctx, cancel := context.WithTimeout(ctx, MainReportInterval/2)
			_ = pools.Write.GetContext(qctx, &r.WALLSN, `SELECT pg_current_wal_lsn()::text`)
			cancel()
		}
		if b, err := json.Marshal(r); err == nil {
			wctx, cancel := context.WithTimeout(ctx, MainReportInterval)
			_ = rdb.Set(wctx, MainReportKey, b, MainReportTTL).Err()
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReadMainReport reads the report ingest published; ok is false when there is none (ingest not
// running, or stopped longer than MainReportTTL ago).
func ReadMainReport(ctx context.Context, rdb redis.Cmdable) (r MainReport, ok bool, err error) {
	b, err := rdb.Get(ctx, MainReportKey).Bytes()
	if errors.Is(err, redis.Nil) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, false, err
	}
	return r, time.Since(r.At) <= MainReportTTL, nil
}
