package ingest

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/pkg/authn"
)

// Service holds the ingest use cases: the buffered writes (start, finish, file registrations,
// package creation) validated in full and held in the Buffer, the two direct writes (file update,
// finalize) and the smart reads that merge the Store with the Buffer. Its methods return domain
// errors (pkg/problem's vocabulary, ConflictError, UnavailableError), answered as they are.
type Service struct {
	Store  Store
	Buffer Buffer
	// Direct, when set (OPS_BUFFERING_ENABLED=false), applies the critical writes to the database
	// at once instead of buffering them; answers say "committed".
	Direct Direct
	// Site is this site's name, the default site of an execution.
	Site string
	// CommittedFilter says the buffer keeps the committed filter (the main site: every
	// committed file passes its buffer, or is learnt from the replay list; buffer/committed.go):
	// registrations then ask the database only when the filter cannot rule a conflict out.
	CommittedFilter bool
	// IdempotencyTTL is how long an Idempotency-Key's answer is kept.
	IdempotencyTTL time.Duration
	// RetryAfter is the Retry-After (seconds) of a 503 when the buffer cannot take a write.
	RetryAfter int
	Metrics    *Metrics
	// known remembers referenced ids seen to exist (obs units, executed obs units): they are
	// never deleted while referenced, so a running observation keeps registering files while
	// the database is briefly unreachable.
	known *knownIDs
}

// NewService returns the service configured as cfg (its exported fields; Direct nil unless
// buffering is disabled), with its own memory of known references.
func NewService(cfg Service) *Service {
	s := cfg
	s.known = newKnownIDs(100_000)
	return &s
}

// Caller is who makes a request: its user (whose Idempotency-Keys are its own), for an API
// token the token's scopes and, for a service account, its kind and bindings (ownership.go).
type Caller struct {
	UserID   int64
	APIToken bool
	Scopes   []string
	Admin    bool
	Service  *authn.ServiceBinding
}

// CallerOf returns the Caller of an authenticated request (the zero Caller for none).
func CallerOf(p *authn.Principal) Caller {
	if p == nil {
		return Caller{}
	}
	return Caller{UserID: p.UserID, APIToken: p.Method == authn.MethodAPIToken, Scopes: p.Scopes, Admin: p.IsAdmin(), Service: p.Service}
}

// Metrics of the API role.
type Metrics struct {
	Enqueue *prometheus.HistogramVec
	Writes  *prometheus.CounterVec
	// CommittedLookups counts file registrations by how their committed ids and paths were
	// checked: "filter" (the committed filter ruled every one out, no query) or "database" (a
	// query: the filter could not, or is not used here). A growing share of "database" on new
	// paths says the filter is filling up (buffer/committed.go, its size).
	CommittedLookups *prometheus.CounterVec
}

// NewMetrics registers the API's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Enqueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "obsops_ingest_enqueue_seconds",
			Help:    "Time to hold a buffered write in Redis (cache entries and task), by kind.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"kind"}),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_ingest_buffered_writes_total",
			Help: "Buffered write requests by kind and result (held, replayed, conflict, unavailable)."}, []string{"kind", "result"}),
		CommittedLookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obsops_ingest_committed_checks_total",
			Help: "File registrations by how committed files were ruled out: filter (no query) or database."}, []string{"by"}),
	}
	for _, by := range []string{"filter", "database"} {
		m.CommittedLookups.WithLabelValues(by)
	}
	reg.MustRegister(m.Enqueue, m.Writes, m.CommittedLookups)
	return m
}

// knownIDs is a bounded set of references seen to exist. Obs units and executed obs units are
// never deleted while executions or files reference them (foreign key, or by design), so a
// positive answer can be reused; the set is cleared when full.
type knownIDs struct {
	mu  sync.Mutex
	max int
	m   map[string]struct{}
}

func newKnownIDs(max int) *knownIDs { return &knownIDs{max: max, m: map[string]struct{}{}} }

func (k *knownIDs) has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[id]
	return ok
}

func (k *knownIDs) add(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= k.max {
		clear(k.m)
	}
	k.m[id] = struct{}{}
}
