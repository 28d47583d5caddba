package visibility

// Config is the catalog's visibility configuration: the site (OPS_SITE_*, shared with the site
// service) and the heatmap settings.
type Config struct {
	Site
	// SyncMaxSources: a heatmap request with at most this many uncached sources is computed on the
	// spot (and cached); more answer 404 with how to precalculate.
	SyncMaxSources int `env:"OPS_VISIBILITY_SYNC_MAX_SOURCES" envDefault:"20"`
	// JobChunk is how many sources a precalculation job computes and stores per step (its
	// progress granularity).
	JobChunk int `env:"OPS_VISIBILITY_JOB_CHUNK" envDefault:"500"`
	// Worker runs the precalculation worker (asynq queue "visibility") inside the catalog process.
	Worker bool `env:"OPS_VISIBILITY_WORKER" envDefault:"true"`
}

// Validate checks the site and the heatmap settings.
func (c *Config) Validate() error {
	if err := c.Site.Validate(); err != nil {
		return err
	}
	if c.SyncMaxSources < 0 || c.SyncMaxSources > 200 {
		return &Invalid{"OPS_VISIBILITY_SYNC_MAX_SOURCES", "must be within [0, 200]"}
	}
	if c.JobChunk < 1 || c.JobChunk > 10000 {
		return &Invalid{"OPS_VISIBILITY_JOB_CHUNK", "must be within [1, 10000]"}
	}
	return nil
}
