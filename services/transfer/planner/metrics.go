package planner

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// knownFailureTypes are the failure types exported at 0 before the first one happens (the
// failures the service itself records); a mover's own error types appear once reported.
var knownFailureTypes = []string{transfer.ErrorTypeChecksumMismatch, transfer.ErrorTypeStalled}

// Metrics exports the pipeline's state to Prometheus at each scrape from the maintained
// counters (transfer_counters and their pending deltas: one small read, the same the overview
// makes, never a scan of operations or packages) and the leases index: operations by kind and
// status, packages by state, failed attempts by type, and leases past their deadline. Every
// series exists from the start, at 0. Every replica exports the same values (they come from the
// database): aggregate with max, not sum.
type Metrics struct {
	Store *postgres.Store

	operations, packages, failures, overdue, overdueOldest, unarchived, up *prometheus.Desc
}

// NewMetrics returns the collector over store.
func NewMetrics(store *postgres.Store) *Metrics {
	return &Metrics{Store: store,
		operations: prometheus.NewDesc("obsops_transfer_operations", "Operations by kind and status (maintained counters).", []string{"kind", "status"}, nil),
		packages:   prometheus.NewDesc("obsops_transfer_packages", "Raw data packages in the pipeline by lifecycle state (maintained counters).", []string{"state"}, nil),
		failures: prometheus.NewDesc("obsops_transfer_operation_failures_total",
			"Failed attempts recorded, by error type (checksum_mismatch: a copy that did not verify; stalled: a lease that expired).", []string{"error_type"}, nil),
		overdue: prometheus.NewDesc("obsops_transfer_leases_overdue",
			"IN_PROGRESS operations whose lease expired without being turned into a stalled failure (the planner expires them every round).", nil, nil),
		overdueOldest: prometheus.NewDesc("obsops_transfer_lease_overdue_seconds",
			"How long past its deadline the most overdue lease is (0: none).", nil, nil),
		unarchived: prometheus.NewDesc("obsops_transfer_oldest_unarchived_package_age_seconds",
			"Age of the oldest package WAITING or TRANSFERRING: how far archive replication lags (0: none).", nil, nil),
		up: prometheus.NewDesc("obsops_transfer_metrics_up", "1 if the last scrape read the database, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.operations, m.packages, m.failures, m.overdue, m.overdueOldest, m.unarchived, m.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: two small reads (the counters, then the overdue
// leases from their partial index and the oldest unarchived package from the state index).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := m.Store.Counters(ctx)
	var lag postgres.Lag
	if err == nil {
		lag, err = m.Store.Lag(ctx)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 1)
	for _, k := range transfer.Kinds() {
		for _, s := range transfer.Statuses() {
			ch <- prometheus.MustNewConstMetric(m.operations, prometheus.GaugeValue, float64(counts["op:"+string(k)+":"+string(s)]), string(k), string(s))
		}
	}
	for _, s := range transfer.PackageStates() {
		ch <- prometheus.MustNewConstMetric(m.packages, prometheus.GaugeValue, float64(counts["pkg:"+string(s)]), string(s))
	}
	types := map[string]float64{}
	for _, t := range knownFailureTypes {
		types[t] = 0
	}
	for k, v := range counts {
		if t, ok := strings.CutPrefix(k, "failures:"); ok {
			types[t] = float64(v)
		}
	}
	for t, v := range types {
		ch <- prometheus.MustNewConstMetric(m.failures, prometheus.CounterValue, v, t)
	}
	ch <- prometheus.MustNewConstMetric(m.overdue, prometheus.GaugeValue, float64(lag.OverdueLeases))
	ch <- prometheus.MustNewConstMetric(m.overdueOldest, prometheus.GaugeValue, lag.OverdueSeconds)
	ch <- prometheus.MustNewConstMetric(m.unarchived, prometheus.GaugeValue, lag.UnarchivedSeconds)
}
