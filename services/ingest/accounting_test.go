package ingest_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
)

// programTime is the time accounting of GET /observing_program/{id} (catalog accounting.go).
type programTime struct {
	AllocatedHours *float64 `json:"allocated_hours"`
	ExecutedHours  *float64 `json:"executed_hours"`
	RemainingHours *float64 `json:"remaining_hours"`
	PendingHours   *float64 `json:"pending_hours"`
	ObsUnits       []struct {
		ID                  int64    `json:"id"`
		DurationS           float64  `json:"duration_s"`
		ExecutedS           *float64 `json:"executed_s"`
		RemainingS          *float64 `json:"remaining_s"`
		CompletedExecutions *int     `json:"completed_executions"`
		PendingS            *float64 `json:"pending_s"`
	} `json:"obs_units"`
}

// nowTime is an obs unit's time in GET /visibility/now.
type nowTime struct {
	Items []struct {
		ObsUnitID            int64   `json:"obs_unit_id"`
		ExecutedS            float64 `json:"executed_s"`
		RemainingS           float64 `json:"remaining_s"`
		ProgramExecutedHours float64 `json:"program_executed_hours"`
	} `json:"items"`
}

// TestProgramTimeBufferedAndCommitted (issue 26, decisions §42): the catalog's time accounting
// counts the completed executions ingest has committed. With the worker behind, an execution
// started and finished (both acknowledged, 201 buffered) does not count yet — in the program
// (GET /observing_program/{id}) or in the ranking (GET /visibility/now) — and the program shows it
// as pending (asked of ingest's buffer); once the worker applied them it counts, in both, and
// nothing is pending. A failed execution never counts, nor is it pending. With ingest's API
// stopped the program is still answered, without the pending figures.
func TestProgramTimeBufferedAndCommitted(t *testing.T) {
	// newCatalogSplitEnv, keeping the API process to stop it at the end
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn"},
		Skip: []string{"transfer", "ingest"}})
	e := envFor(t, s)
	api := testenv.Start(t, "ingest-api", testenv.Binary(t, "ingest"), s.Env, "-role", "api")
	testenv.WaitReady(t, api, s.URLs["ingest"]+"/readyz", 30*time.Second)
	observer := e.s.JWT(t, "olivia", "observer")
	prog := e.programOf(t, e.obsUnit) // one obs unit of 600 s
	_, err := e.db.Exec(`UPDATE observing_programs SET allocated_hours = 1, status = 'active' WHERE id = $1`, prog)
	require.NoError(t, err)
	path := "/observing_program/" + strconv.FormatInt(prog, 10)
	read := func() (programTime, nowTime) {
		t.Helper()
		r := e.do(t, http.MethodGet, path, observer, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var p programTime
		r.json(t, &p)
		require.Len(t, p.ObsUnits, 1)
		r = e.do(t, http.MethodGet, "/visibility/now?at=2026-11-25T03:00:00Z", observer, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var n nowTime
		r.json(t, &n)
		require.Len(t, n.Items, 1)
		require.Equal(t, e.obsUnit, n.Items[0].ObsUnitID)
		return p, n
	}

	// Nothing executed: 0 of 600 s, 0 of 1 h.
	p, n := read()
	u := p.ObsUnits[0]
	require.Equal(t, 0.0, *u.ExecutedS)
	require.Equal(t, 600.0, *u.RemainingS)
	require.Equal(t, 0, *u.CompletedExecutions)
	require.Equal(t, 0.0, *p.ExecutedHours)
	require.Equal(t, 1.0, *p.RemainingHours)
	require.Equal(t, 0.0, *u.PendingS)
	require.Equal(t, 0.0, *p.PendingHours)

	// Started and finished (completed, 240 s), and another finished failed: all still buffered.
	st := e.start(t, startBody(e.obsUnit)) // starts 2026-11-25T01:00:00Z
	fin := e.do(t, http.MethodPut, "/executed_obs_units/"+st.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T01:04:00Z", "status": "completed"})
	require.Equal(t, http.StatusCreated, fin.Status, "%s", fin.Body)
	var finA answer
	fin.json(t, &finA)
	require.Equal(t, "buffered", finA.Status)
	failed := e.start(t, startBody(e.obsUnit))
	ff := e.do(t, http.MethodPut, "/executed_obs_units/"+failed.ID+"/finish", e.token, map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "failed"})
	require.Equal(t, http.StatusCreated, ff.Status, "%s", ff.Body)
	var ffA answer
	ff.json(t, &ffA)

	p, n = read()
	require.Equal(t, 0.0, *p.ObsUnits[0].ExecutedS, "buffered executions do not count yet")
	require.Equal(t, 600.0, *p.ObsUnits[0].RemainingS)
	require.Equal(t, 0.0, *p.ExecutedHours)
	require.Equal(t, 240.0, *p.ObsUnits[0].PendingS, "the completed one is pending, the failed one not")
	require.InDelta(t, 240.0/3600, *p.PendingHours, 1e-12)
	require.Equal(t, 0.0, n.Items[0].ExecutedS)
	require.Equal(t, 600.0, n.Items[0].RemainingS)

	// The worker commits them: the completed one counts, the failed one does not.
	ingestProc(t, e.s, "worker", nil)
	for _, tx := range []string{st.TransactionID, finA.TransactionID, failed.TransactionID, ffA.TransactionID} {
		e.waitCommitted(t, tx)
	}
	p, n = read()
	u = p.ObsUnits[0]
	require.Equal(t, 240.0, *u.ExecutedS)
	require.Equal(t, 360.0, *u.RemainingS)
	require.Equal(t, 1, *u.CompletedExecutions)
	require.InDelta(t, 240.0/3600, *p.ExecutedHours, 1e-12)
	require.InDelta(t, 1-240.0/3600, *p.RemainingHours, 1e-12)
	require.Equal(t, 240.0, n.Items[0].ExecutedS)
	require.Equal(t, 360.0, n.Items[0].RemainingS)
	require.InDelta(t, 240.0/3600, n.Items[0].ProgramExecutedHours, 1e-12)
	require.Equal(t, 0.0, *u.PendingS)
	require.Equal(t, 0.0, *p.PendingHours)

	// The pending route is internal: refused without the secret, never routed by the gateway.
	req := contract.PendingRequest{ObsUnitIDs: []int64{e.obsUnit}}
	require.Equal(t, http.StatusForbidden, doURL(t, e.c, http.MethodPost, s.URLs["ingest"]+contract.ObsUnitPendingPath, "", req).Status)
	require.Equal(t, http.StatusNotFound, e.do(t, http.MethodPost, contract.ObsUnitPendingPath, e.token, req,
		contract.InternalSecretHeader, s.Env["OPS_INTERNAL_SECRET"]).Status)

	// Ingest's API down: the committed figures, no pending ones.
	require.NoError(t, api.Stop(10*time.Second))
	p, _ = read()
	require.Equal(t, 240.0, *p.ObsUnits[0].ExecutedS)
	require.Nil(t, p.ObsUnits[0].PendingS)
	require.Nil(t, p.PendingHours)
}
