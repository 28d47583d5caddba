package planner_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/transfer/internal/transfertest"
	"github.com/obsops/obsops/services/transfer/planner"
)

func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "obsops_transfer_planner_active" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// Of two planners one works, the other stands by and takes over when the first stops; the
// work gets done either way.
func TestOnePlannerActiveAndTakeover(t *testing.T) {
	e := transfertest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := planner.NewPlanner(e.DB, e.Store, e.RDB, e.Reconciler, e.Config, log, regA)
	b := planner.NewPlanner(e.DB, e.Store, e.RDB, e.Reconciler, e.Config, log, regB)
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA := make(chan struct{})
	go func() { a.Run(ctxA); close(doneA) }()
	go b.Run(ctxB)

	require.Eventually(t, func() bool { return gauge(t, regA)+gauge(t, regB) == 1 }, 10*time.Second, 20*time.Millisecond)
	for i := 0; i < 10; i++ {
		require.Equal(t, 1.0, gauge(t, regA)+gauge(t, regB), "never two active planners")
		time.Sleep(30 * time.Millisecond)
	}
	transfertest.AddPackages(t, e.DB, 2, 1, "complete")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.DB.Get(&n, `SELECT count(*) FROM operations`))
		return n == 2
	}, 10*time.Second, 20*time.Millisecond, "the active planner brings packages in")

	leader, standby := regA, regB
	stopLeader := stopA
	if gauge(t, regB) == 1 {
		leader, standby, stopLeader = regB, regA, stopB
	}
	stopLeader()
	require.Eventually(t, func() bool { return gauge(t, leader) == 0 && gauge(t, standby) == 1 }, 10*time.Second, 20*time.Millisecond, "the standby takes over")
	stopA()
	<-doneA
}
