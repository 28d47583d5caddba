package authtoken

import (
	"github.com/prometheus/client_golang/prometheus"
)

// TokenMetrics are the Prometheus metrics of token verification.
type TokenMetrics struct {
	verifications *prometheus.CounterVec
	direct        prometheus.Counter
	cache         *prometheus.CounterVec
	invalidations prometheus.Counter
}

// NewTokenMetrics registers the token verification metrics with reg.
func NewTokenMetrics(reg prometheus.Registerer) *TokenMetrics {
	m := &TokenMetrics{
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_token_verifications_total",
			Help: "API token verifications by result (ok, malformed, invalid, insufficient_scope, error).",
		}, []string{"result"}),
		direct: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_token_usage_direct_updates_total",
			Help: "Token uses written straight to PostgreSQL because Redis was unavailable.",
		}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_token_cache_lookups_total",
			Help: "Token record lookups in the Redis cache by result (hit, miss, error).",
		}, []string{"result"}),
		invalidations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "obsops_token_cache_invalidation_failures_total",
			Help: "Token changes whose cached records could not be invalidated (Redis unavailable); they lag by up to the cache TTL.",
		}),
	}
	reg.MustRegister(m.verifications, m.direct, m.cache, m.invalidations)
	return m
}

func (m *TokenMetrics) cacheLookup(result string) {
	if m != nil {
		m.cache.WithLabelValues(result).Inc()
	}
}

func (m *TokenMetrics) invalidationFailed() {
	if m != nil {
		m.invalidations.Inc()
	}
}

func (m *TokenMetrics) verified(result string) {
	if m != nil {
		m.verifications.WithLabelValues(result).Inc()
	}
}

func (m *TokenMetrics) directUpdate() {
	if m != nil {
		m.direct.Inc()
	}
}
