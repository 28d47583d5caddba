// Package site answers the public monitoring questions about one obsops site: what it is and
// where (info), whether every part of the suite is healthy (health), and how the critical-write
// buffer is doing (buffer stats). It writes no tables.
package site

import (
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/database"
)

// Config is the site service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr string `env:"OPS_SITE_ADDR" envDefault:"127.0.0.1:8085"`
	config.Site
	BufferingEnabled bool `env:"OPS_BUFFERING_ENABLED" envDefault:"true"`
	// WeatherRetentionDays: weather readings older than this (by their time) are deleted by the
	// pruning loop every WeatherPruneInterval (main site only; a secondary reads the replica).
	WeatherRetentionDays int           `env:"OPS_WEATHER_RETENTION_DAYS" envDefault:"400"`
	WeatherPruneInterval time.Duration `env:"OPS_WEATHER_PRUNE_INTERVAL" envDefault:"1h"`
	// ObservatoryStatusURL is the observatory's (the secondary site's) /buffer-stats, which the
	// main site polls across the WAN for GET /api/site/observatory; empty: none is watched.
	ObservatoryStatusURL string `env:"OPS_OBSERVATORY_STATUS_URL"`
}

// Validate checks the weather and observatory settings (the embedded settings validate
// themselves).
func (c *Config) Validate() error {
	switch {
	case c.WeatherRetentionDays < 1:
		return &config.Invalid{Var: "OPS_WEATHER_RETENTION_DAYS", Reason: "must be at least 1"}
	case c.WeatherPruneInterval < time.Minute:
		return &config.Invalid{Var: "OPS_WEATHER_PRUNE_INTERVAL", Reason: "must be at least 1m"}
	case c.ObservatoryStatusURL == "":
		return nil
	case c.Secondary():
		return &config.Invalid{Var: "OPS_OBSERVATORY_STATUS_URL", Reason: "set at the main site only (the observatory's status is polled from the data centre)"}
	}
	return config.URL("OPS_OBSERVATORY_STATUS_URL", c.ObservatoryStatusURL, "http", "https")
}

// Location is the observatory's position (WGS84, longitude east-positive).
type Location struct {
	LatitudeDeg  float64 `json:"latitude_deg" doc:"Geodetic latitude, degrees north."`
	LongitudeDeg float64 `json:"longitude_deg" doc:"Longitude, degrees east-positive."`
	ElevationM   float64 `json:"elevation_m" doc:"Height above the WGS84 ellipsoid in metres."`
}

// ElevationLimits are the telescope's pointing limits.
type ElevationLimits struct {
	MinDeg float64 `json:"min_deg"`
	MaxDeg float64 `json:"max_deg"`
}

// Buffering tells clients whether critical operations are buffered through the ingest queue.
type Buffering struct {
	CriticalOperationsBuffered bool     `json:"critical_operations_buffered"`
	Queue                      string   `json:"queue"`
	BufferedOperations         []string `json:"buffered_operations"`
}

// Info is the public description of the site.
type Info struct {
	SiteName        string          `json:"site_name"`
	SiteType        string          `json:"site_type" enum:"main,secondary"`
	Location        Location        `json:"location"`
	ElevationLimits ElevationLimits `json:"elevation_limits_deg"`
	SunAvoidanceDeg float64         `json:"sun_avoidance_deg"`
	Buffering       Buffering       `json:"buffering"`
	Version         string          `json:"version"`
	Commit          string          `json:"commit"`
	// Status is the moving part, from the latest sample (at most a few seconds old).
	Status *SiteStatus `json:"status,omitempty"`
}

// SiteStatus is how the site is doing: the main site's database as seen from here, the local
// replica (secondary sites) and the buffer's backlog and replay.
type SiteStatus struct {
	MeasuredAt time.Time           `json:"measured_at"`
	Main       database.MainStatus `json:"main"`
	Replica    *ReplicaStatus      `json:"replica,omitempty"`
	Buffer     *BufferSummary      `json:"buffer,omitempty"`
}

// StatusOf is the public status in a sample (no error text: it may name addresses).
func StatusOf(s Sample) *SiteStatus {
	if s.At.IsZero() {
		return nil
	}
	st := &SiteStatus{MeasuredAt: s.At, Main: s.Main, Replica: s.Replica}
	st.Main.LastError = ""
	if s.Buffer != nil {
		st.Buffer = s.Buffer.Summary()
	}
	return st
}

// NewInfo describes the site from its configuration and build.
func NewInfo(c *Config, version, commit string) Info {
	return Info{
		SiteName: c.SiteName,
		SiteType: c.SiteType,
		Location: Location{LatitudeDeg: c.LatitudeDeg, LongitudeDeg: c.LongitudeDeg, ElevationM: c.ElevationM},
		ElevationLimits: ElevationLimits{
			MinDeg: c.MinElevationDeg, MaxDeg: c.MaxElevationDeg,
		},
		SunAvoidanceDeg: c.SunAvoidanceDeg,
		Buffering: Buffering{
			CriticalOperationsBuffered: c.BufferingEnabled,
			Queue:                      contract.IngestQueue,
			BufferedOperations:         bufferedOperations(),
		},
		Version: version,
		Commit:  commit,
	}
}

// bufferedOperations lists the critical operations as "METHOD /path" (contract.BufferedOperations).
func bufferedOperations() []string {
	var out []string
	for _, op := range contract.BufferedOperations() {
		out = append(out, op.String())
	}
	return out
}
