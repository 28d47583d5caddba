package transfer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// TestMoversAreTheirOwnKind (issue 24, point 4): only mover accounts use the agent API (an
// instrument's token, or a service account without a kind, is refused with 403); a mover is
// leased only operations whose source or destination is one of its bound locations, and its
// reports (heartbeat, complete, fail) on another location's operation are 404, changing nothing.
func TestMoversAreTheirOwnKind(t *testing.T) {
	s := startStack(t, nil)
	gw := s.GatewayURL
	// cornell: the Cornell archive alone; fyst: the observatory's source and the Cologne buffer,
	// the two ends of every raw_data_package operation.
	cornell := s.Admin(t, "create-service-token", "--account", "mover-cornell", "--scopes", "write:data", "--kind", "mover", "--locations", "4")
	fyst := s.Admin(t, "create-service-token", "--account", "mover-fyst", "--scopes", "write:data", "--kind", "mover", "--locations", "1,2")
	instrument := s.Admin(t, "create-service-token", "--account", "daq", "--scopes", "write:data", "--kind", "instrument", "--modules", "11")
	legacy := s.Admin(t, "create-service-token", "--account", "old-mover", "--scopes", "write:data")
	rdp := map[string]any{"kinds": []string{"raw_data_package"}, "max": 10, "agent": "h"}

	for name, c := range map[string]struct{ token, says string }{
		"instrument": {instrument, "not an instrument account"},
		"no kind":    {legacy, "this account has no kind yet"},
	} {
		tok := c.token
		r := call(t, "POST", gw+"/api/transfer/agent/claim", tok, rdp)
		require.Equal(t, 403, r.Status, "%s: %s", name, r.Body)
		require.Contains(t, problemOf(t, r).Detail, "only a service account of kind mover")
		require.Contains(t, problemOf(t, r).Detail, c.says)
		r = call(t, "POST", gw+"/api/transfer/agent/operations/1/heartbeat", tok, map[string]any{"agent": "h"})
		require.Equal(t, 403, r.Status, "%s: %s", name, r.Body)
	}

	transfertest.AddPackages(t, s.Kit.DB, 3, 1000, "complete")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, s.Kit.DB.Get(&n, `SELECT count(*) FROM operations WHERE kind = 'raw_data_package' AND status = 'PENDING'`))
		if n == 3 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the planner made %d raw_data_package operations", n)
		time.Sleep(50 * time.Millisecond)
	}
	// The Cornell mover is never leased the observatory's operations, however often it asks.
	for range 5 {
		require.Empty(t, claim(t, gw, cornell, rdp))
	}
	ops := claim(t, gw, fyst, rdp)
	require.Len(t, ops, 3)
	for _, o := range ops {
		require.Equal(t, "mover-fyst/h", *o.LeaseHolder)
	}
	o := ops[0]
	full, err := s.Kit.Store.Operation(t.Context(), "", o.ID)
	require.NoError(t, err)
	size, sum := transfertest.Report(t, s.Kit.DB, full)
	base := fmt.Sprintf("%s/api/transfer/agent/operations/%d/", gw, o.ID)
	for _, report := range []struct {
		path string
		body map[string]any
	}{
		{"heartbeat", map[string]any{"agent": "h"}},
		{"complete", map[string]any{"agent": "h", "bytes": size, "checksum": sum}},
		{"fail", map[string]any{"agent": "h", "error_type": "network", "message": "x", "retryable": false}},
	} {
		r := call(t, "POST", base+report.path, cornell, report.body)
		require.Equal(t, 404, r.Status, "%s of another location's operation: %s", report.path, r.Body)
		require.NotContains(t, string(r.Body), "mover-fyst", "the 404 does not name the holder")
	}
	after, err := s.Kit.Store.Operation(t.Context(), "", o.ID)
	require.NoError(t, err)
	require.Equal(t, "IN_PROGRESS", string(after.Status))
	require.Equal(t, "mover-fyst/h", *after.LeaseHolder)
	require.Equal(t, full.Attempt, after.Attempt)

	// Its own mover completes it; a mover bound to the location but not holding the lease is
	// refused as before (409: leased to another).
	other := s.Admin(t, "create-service-token", "--account", "mover-fyst-2", "--scopes", "write:data", "--kind", "mover", "--locations", "1")
	r := call(t, "POST", base+"heartbeat", other, map[string]any{"agent": "h"})
	require.Equal(t, 409, r.Status, "%s", r.Body)
	r = call(t, "POST", base+"complete", fyst, map[string]any{"agent": "h", "bytes": size, "checksum": sum})
	require.Equal(t, 200, r.Status, "%s", r.Body)
}
