package site

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/database"
)

// BufferStats describes the critical-write buffer of this site: the asynq queue that ingest
// workers drain into the main database.
type BufferStats struct {
	Site              string    `json:"site"`
	SiteType          string    `json:"site_type"`
	Queue             string    `json:"queue"`
	Pending           int       `json:"pending" doc:"Tasks waiting for a worker (a task holds one write, or several that arrived together)."`
	Active            int       `json:"active" doc:"Tasks being applied now."`
	Scheduled         int       `json:"scheduled"`
	Retry             int       `json:"retry" doc:"Tasks that failed and wait to be retried (e.g. main database unreachable)."`
	Archived          int       `json:"archived" doc:"Dead-lettered tasks: permanently invalid, kept with their error."`
	ProcessedToday    int       `json:"processed_today"`
	FailedToday       int       `json:"failed_today"`
	ProcessedTotal    int       `json:"processed_total"`
	FailedTotal       int       `json:"failed_total"`
	OldestPendingAgeS float64   `json:"oldest_pending_age_seconds" doc:"Age of the oldest pending task; 0 when none."`
	Paused            bool      `json:"paused"`
	MemoryUsageBytes  int64     `json:"memory_usage_bytes"`
	MainDBReachable   bool      `json:"main_db_reachable" doc:"Whether the main site's database answers (main.reachable)."`
	MeasuredAt        time.Time `json:"measured_at"`
	// Main is the main site's database as this site sees it: reachable or not, since when.
	Main database.MainStatus `json:"main"`
	// ReplayRatePerS is how many buffer tasks were processed per second over the last minute.
	ReplayRatePerS float64 `json:"replay_rate_per_second" doc:"Buffer tasks processed per second over the last minute (a task holds one write, or several that arrived together; 0 until two samples exist)."`
	// Replica is the local replica's lag (secondary sites only).
	Replica *ReplicaStatus `json:"replica,omitempty"`
	// RevocationBoundS is how long an API token revoked at the main site may still be accepted
	// at this site (Monitor.revocationBound); absent at a secondary while the main is unreachable.
	RevocationBoundS *float64 `json:"revocation_bound_s,omitempty" doc:"The most seconds an API token revoked at the main site can still be accepted here: OPS_TOKEN_CACHE_TTL at the main site; at a secondary that plus its authtoken's record cache (1 s) plus the replica's lag (lag_seconds). Absent at a secondary while the main is unreachable: revocations reach it when the WAN returns."`
	// LastApplyAt is when an ingest worker last committed a buffered write (absent before the
	// first); with a growing backlog it tells how long replay has been stuck.
	LastApplyAt *time.Time `json:"last_apply_at,omitempty"`
	// DeadLetters are the most recent archived tasks (at most 10) with their errors; the
	// runbook: `ingest admin dead-letters list|retry|drop`.
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
}

// DeadLetter is an archived ingest task: a write that can never apply, kept with its error.
type DeadLetter struct {
	TaskID   string    `json:"task_id"`
	Type     string    `json:"type"`
	Error    string    `json:"error"`
	FailedAt time.Time `json:"failed_at"`
}

// BufferInspector reads queue statistics from Redis through asynq's inspector.
type BufferInspector struct {
	Inspector *asynq.Inspector
	Redis     redis.UniversalClient // reads contract.IngestLastApplyKey
	Site      string
	SiteType  string
}

// Stats reads the ingest queue (the main link, replica and replay rate are the Monitor's to add). A queue that has never held a task reports zeros, not an error.
func (b *BufferInspector) Stats(ctx context.Context) (BufferStats, error) {
	st := BufferStats{Site: b.Site, SiteType: b.SiteType, Queue: contract.IngestQueue, MeasuredAt: time.Now().UTC()}
	queues, err := b.Inspector.Queues()
	if err != nil {
		return st, fmt.Errorf("read queues: %w", err)
	}
	if slices.Contains(queues, contract.IngestQueue) {
		qi, err := b.Inspector.GetQueueInfo(contract.IngestQueue)
		if err != nil {
			return st, fmt.Errorf("read queue %s: %w", contract.IngestQueue, err)
		}
		st.Pending, st.Active, st.Scheduled, st.Retry, st.Archived = qi.Pending, qi.Active, qi.Scheduled, qi.Retry, qi.Archived
		st.ProcessedToday, st.FailedToday = qi.Processed, qi.Failed
		st.ProcessedTotal, st.FailedTotal = qi.ProcessedTotal, qi.FailedTotal
		st.OldestPendingAgeS = qi.Latency.Seconds()
		st.Paused = qi.Paused
		st.MemoryUsageBytes = qi.MemoryUsage
		st.MeasuredAt = qi.Timestamp.UTC()
		if qi.Archived > 0 {
			dead, err := b.Inspector.ListArchivedTasks(contract.IngestQueue, asynq.PageSize(10))
			if err != nil {
				return st, fmt.Errorf("read dead letters: %w", err)
			}
			for _, t := range dead {
				st.DeadLetters = append(st.DeadLetters, DeadLetter{TaskID: t.ID, Type: t.Type, Error: t.LastErr, FailedAt: t.LastFailedAt.UTC()})
			}
		}
	}
	if b.Redis != nil {
		if ms, err := b.Redis.Get(ctx, contract.IngestLastApplyKey).Int64(); err == nil {
			t := time.UnixMilli(ms).UTC()
			st.LastApplyAt = &t
		}
	}
	return st, nil
}
