// Package ingest is the domain of the ingest service: executed obs units, raw data files and raw
// data packages, whose critical writes are buffered through Redis (asynq queue "ingest") and
// applied to the main database by workers.
//
// The root package is the domain: configuration, the records and the request bodies with their
// decoders and validators, the tasks the API enqueues for the worker, and the use cases with their
// rules (Service: writes.go, references.go, reads.go) over the interfaces it declares (Store,
// Buffer, Direct), which postgres and buffer implement. httpapi decodes, calls Service and
// encodes; app wires a process.
package ingest

import (
	"time"

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

// Limits of the request bodies (docs/api.md), so one request cannot exhaust the API or the worker.
const (
	MaxBulkFiles    = 10000 // files in one POST /raw_data_files/bulk
	MaxPathBytes    = 1024  // a raw data file's relative path
	MaxMetaBytes    = 16 << 10
	MaxNameLength   = 255 // a package's name
	MaxSiteLength   = 64
	MaxPackageFiles = MaxBulkFiles // file_ids of one package create or finalize
)

// Config is the ingest service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr              string `env:"OPS_INGEST_ADDR" envDefault:"127.0.0.1:8084"`
	WorkerConcurrency int    `env:"OPS_INGEST_WORKER_CONCURRENCY" envDefault:"200"`
	// WorkerNice is the scheduling niceness of a -role worker process (0: as started), so that on
	// a machine it shares with the API a burst is acknowledged first and applied after.
	WorkerNice int `env:"OPS_INGEST_WORKER_NICE" envDefault:"10"`
	// BulkBodyLimitBytes is the body limit of POST /raw_data_files/bulk, the one route whose
	// bodies are larger than OPS_BODY_LIMIT_BYTES: 10,000 files with paths of a few hundred bytes.
	BulkBodyLimitBytes int `env:"OPS_INGEST_BULK_BODY_LIMIT_BYTES" envDefault:"16777216"`
	// IdempotencyTTL is how long an Idempotency-Key and its answer are kept: at least 24 h, the
	// retry window clients are promised (docs/api.md).
	IdempotencyTTL time.Duration `env:"OPS_INGEST_IDEMPOTENCY_TTL" envDefault:"24h"`
	// IdempotencyMaxPerCredential bounds the unexpired Idempotency-Keys one user (all of its
	// credentials) holds in Redis, which evicts nothing: beyond it a keyed write is answered 429.
	IdempotencyMaxPerCredential int `env:"OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL" envDefault:"50000"`
	// RedisTimeout bounds every Redis round trip of a buffered write, so a write Redis cannot take
	// is answered 503 quickly instead of hanging.
	RedisTimeout time.Duration `env:"OPS_INGEST_REDIS_TIMEOUT" envDefault:"1s"`
	// BufferingEnabled: false makes the critical writes go straight to PostgreSQL (answered
	// "committed"); a main site may choose it. The site service reports the same setting.
	BufferingEnabled bool `env:"OPS_BUFFERING_ENABLED" envDefault:"true"`
	// RetryAfter is the Retry-After (seconds) of a 503 answered when Redis cannot take a write.
	RetryAfter int `env:"OPS_INGEST_RETRY_AFTER" envDefault:"2"`
}

// Validate checks the ingest settings.
func (c *Config) Validate() error {
	switch {
	case c.WorkerConcurrency < 1 || c.WorkerConcurrency > 1000:
		return &config.Invalid{Var: "OPS_INGEST_WORKER_CONCURRENCY", Reason: "must be within [1, 1000]"}
	case c.WorkerNice < 0 || c.WorkerNice > 19:
		return &config.Invalid{Var: "OPS_INGEST_WORKER_NICE", Reason: "must be within [0, 19]"}
	case c.BulkBodyLimitBytes < 1<<20 || c.BulkBodyLimitBytes > 1<<30:
		return &config.Invalid{Var: "OPS_INGEST_BULK_BODY_LIMIT_BYTES", Reason: "must be within [1 MiB, 1 GiB]"}
	case c.IdempotencyTTL < 24*time.Hour:
		return &config.Invalid{Var: "OPS_INGEST_IDEMPOTENCY_TTL", Reason: "must be at least 24h"}
	case c.IdempotencyMaxPerCredential < 1 || c.IdempotencyMaxPerCredential > 10000000:
		return &config.Invalid{Var: "OPS_INGEST_IDEMPOTENCY_MAX_PER_CREDENTIAL", Reason: "must be within [1, 10000000]"}
	case c.RedisTimeout < 10*time.Millisecond || c.RedisTimeout > 30*time.Second:
		return &config.Invalid{Var: "OPS_INGEST_REDIS_TIMEOUT", Reason: "must be within [10ms, 30s]"}
	case c.RetryAfter < 1 || c.RetryAfter > 3600:
		return &config.Invalid{Var: "OPS_INGEST_RETRY_AFTER", Reason: "must be within [1, 3600] seconds"}
	}
	return nil
}

// ValidRole reports whether role is one of the -role values.
func ValidRole(role string) bool {
	return role == RoleAPI || role == RoleWorker || role == RoleAll
}
