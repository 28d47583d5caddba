// Package ingest is the domain of the ingest service: executed obs units, raw data files and raw
// data packages, whose critical writes are buffered through Redis (asynq queue "ingest") and
// applied to the main database by workers.
package ingest

import (
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/contract"
)

// Queue is the asynq queue that buffers critical writes (contract.IngestQueue, which the site
// service reads too).
const Queue = contract.IngestQueue

// Roles a process of the ingest binary can take (-role).
const (
	RoleAPI    = "api"    // HTTP API: validates and buffers writes, serves reads
	RoleWorker = "worker" // drains the queue into the main database
	RoleAll    = "all"    // both, for a single-machine install
)

// Config is the ingest service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr              string `env:"OPS_INGEST_ADDR" envDefault:"127.0.0.1:8084"`
	WorkerConcurrency int    `env:"OPS_INGEST_WORKER_CONCURRENCY" envDefault:"20"`
}

// Validate checks the ingest settings.
func (c *Config) Validate() error {
	if c.WorkerConcurrency < 1 || c.WorkerConcurrency > 1000 {
		return &config.Invalid{Var: "OPS_INGEST_WORKER_CONCURRENCY", Reason: "must be within [1, 1000]"}
	}
	return nil
}

// ValidRole reports whether role is one of the -role values.
func ValidRole(role string) bool {
	return role == RoleAPI || role == RoleWorker || role == RoleAll
}
