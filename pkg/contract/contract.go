// Package contract is the one home of the names that cross service boundaries: what one
// service writes and another reads (queues, pub/sub channels), the routes whose meaning several
// services share (the buffered operations, internal paths). A name used on both sides of a
// boundary is spelled once, here, so the two sides cannot drift apart.
package contract

import "time"

// IngestQueue is the asynq queue of the critical-write buffer: ingest's API enqueues into it,
// ingest's workers drain it, the site service reports it in /buffer-stats.
const IngestQueue = "ingest"

// IngestLastApplyKey is the Redis key where ingest workers record (unix milliseconds) their last
// commit to the main database; the site service reports it in /buffer-stats and /health.
const IngestLastApplyKey = "ingest:stats:last_apply"

// TransferOverviewChannel is the Redis pub/sub channel on which every transfer replica
// publishes the overview updates it makes, so that every replica's WebSocket clients see them.
const TransferOverviewChannel = "ops:transfer:overview"

// The user directory (pkg/authn's revocation.go): authtoken writes what every service must
// know about every user (username, active, sessions valid after, roles) to the hash
// UserDirectoryKey, its content digest to UserDirectoryVersionKey, and announces each new
// version on UserDirectoryChannel; every service's authenticator keeps a copy. The keys share
// the hash tag {users}, so one transaction can replace both in Redis Cluster too.
const (
	UserDirectoryKey        = "ops:{users}:directory"
	UserDirectoryVersionKey = "ops:{users}:directory:version"
	UserDirectoryChannel    = "ops:users:directory"
)

// API token usage (docs/api.md, "API tokens"): a successful verification adds one use to the hash
// TokenUsageCountKey (field: token id, value: uses not yet committed) and sets the token's field
// of TokenUsageLastKey to "<unix microseconds> <client address>" of that use, both in one MULTI.
// authtoken's usage flusher commits them to PostgreSQL; services that verified a token from their
// in-process cache (pkg/authn) record the use themselves the same way.
const (
	TokenUsageCountKey = "ops:{tokenusage}:count"
	TokenUsageLastKey  = "ops:{tokenusage}:last"
)

// TokenInvalidationChannel is where authtoken announces that API tokens changed (revoked,
// regenerated, rescoped, their user changed, the cache purged), right after dropping their
// records from its Redis cache; every service's in-process token cache (pkg/authn) empties
// itself on any message.
const TokenInvalidationChannel = "ops:tokens:invalidated"

// SecondaryTokenRecordTTL is how long a secondary site's authtoken caches an API token's record
// in its Redis. A revocation at the main site invalidates the main's cache only: the secondary
// learns it from its replica, so its records must be re-read that often (the main's live
// tokencache.DefaultTTL, their invalidation is immediate). The site service reports the bound
// this sets (/buffer-stats revocation_bound_s).
const SecondaryTokenRecordTTL = time.Second

// InternalPrefix begins the paths services offer each other and never the public: the gateway
// refuses everything under it (any letter case).
const InternalPrefix = "/internal"

// TokenVerifyPath is authtoken's internal route that verifies an API token for another
// service (pkg/authn's remote verifier calls it).
const TokenVerifyPath = InternalPrefix + "/tokens/verify"

// Operation is one HTTP route: a method and a path template.
type Operation struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// String is the route as "METHOD /path".
func (o Operation) String() string { return o.Method + " " + o.Path }

// BufferedOperations are the critical writes (docs/architecture.md, "The ingest buffer"): ingest buffers them through
// IngestQueue so an observatory keeps recording while the main database is out of reach; the
// site service announces them in /api/site/info.
func BufferedOperations() []Operation {
	return []Operation{
		{"POST", "/executed_obs_units/start"},
		{"PUT", "/executed_obs_units/{id}/finish"},
		{"POST", "/raw_data_files/"},
		{"POST", "/raw_data_files/bulk"},
		{"POST", "/raw_data_package/"},
	}
}

// InternalSecretHeader carries the suite's internal secret (OPS_INTERNAL_SECRET) from the
// gateway to the services and between services; only a request carrying it may name the client
// address. A client never gets to send it: the gateway replaces it on every request it forwards.
const InternalSecretHeader = "X-Obsops-Internal-Secret"

// ForwardedClientHeader is where the gateway names the client to the services (believed only
// with InternalSecretHeader).
const ForwardedClientHeader = "X-Real-IP"

// CredentialVerifiedHeader is set by a service on its answer to a request whose credential
// verified (whatever the route then decided; pkg/authn sets it), to the credential's account (a
// user id, or "verified" when not known). The gateway gives that account a rate-limit budget of
// its own, shared by every credential of the account, and removes the header from the answer.
const CredentialVerifiedHeader = "X-Obsops-Credential-Verified"
