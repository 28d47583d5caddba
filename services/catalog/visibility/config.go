package visibility

import "github.com/obsops/obsops/pkg/config"

// Config is the catalog's heatmap settings (the site itself is config.Site, read with the
// catalog's configuration).
type Config struct {
	// SyncMaxSources: a heatmap request with at most this many uncached sources is computed on the
	// spot (and cached); more answer 404 with how to precalculate.
	SyncMaxSources int `env:"OPS_VISIBILITY_SYNC_MAX_SOURCES" envDefault:"20"`
	// JobChunk is how many sources a precalculation job computes and stores per step (its
	// progress granularity).
	JobChunk int `env:"OPS_VISIBILITY_JOB_CHUNK" envDefault:"500"`
	// MaxOpenJobs bounds the precalculation jobs queued or running at once: beyond it a new job
	// is refused (503 with Retry-After) instead of growing the queue without bound.
	MaxOpenJobs int `env:"OPS_VISIBILITY_MAX_OPEN_JOBS" envDefault:"16"`
	// Worker runs the precalculation worker (asynq queue "visibility") inside the catalog process.
	Worker bool `env:"OPS_VISIBILITY_WORKER" envDefault:"true"`
}

// Validate checks the heatmap settings.
func (c *Config) Validate() error {
	if c.SyncMaxSources < 0 || c.SyncMaxSources > 200 {
		return &config.Invalid{Var: "OPS_VISIBILITY_SYNC_MAX_SOURCES", Reason: "must be within [0, 200]"}
	}
	if c.JobChunk < 1 || c.JobChunk > 10000 {
		return &config.Invalid{Var: "OPS_VISIBILITY_JOB_CHUNK", Reason: "must be within [1, 10000]"}
	}
	if c.MaxOpenJobs < 1 {
		return &config.Invalid{Var: "OPS_VISIBILITY_MAX_OPEN_JOBS", Reason: "must be at least 1"}
	}
	return nil
}
