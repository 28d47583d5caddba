package transfer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/transfer/internal/transfertest"
	"github.com/obsops/obsops/services/transfer/planner"
)

// TestConsoleReads: the routes the web console reads — raw packages by execution and instrument
// module, and the inconsistent set (any user; 422 naming a bad filter; reconciling empties it).
func TestConsoleReads(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_PLANNER_INTERVAL": "1h"}) // the test drives the planner
	gw := s.GatewayURL
	pkgs := transfertest.AddPackages(t, s.Kit.DB, 3, 1000, "complete")
	s.Kit.Round(t) // the packages enter the pipeline
	var exec string
	var module int64
	require.NoError(t, s.Kit.DB.QueryRow(`SELECT executed_obs_unit_id, instrument_module_id FROM raw_data_packages WHERE id = $1`, pkgs[0]).Scan(&exec, &module))

	type pkgPage struct {
		Items []struct{ ID string } `json:"items"`
		Total int                   `json:"total"`
	}
	get := func(query string) pkgPage {
		r := call(t, "GET", gw+"/api/transfer/raw-packages"+query, s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var p pkgPage
		r.JSON(t, &p)
		return p
	}
	p := get("?executed_obs_unit_id=" + exec)
	require.Equal(t, 1, p.Total)
	require.Equal(t, pkgs[0].String(), p.Items[0].ID)
	require.Equal(t, 3, get("?instrument_module_id="+itoa(module)).Total)
	require.Equal(t, 1, get("?instrument_module_id="+itoa(module)+"&executed_obs_unit_id="+exec).Total)
	require.Equal(t, 0, get("?instrument_module_id=9999").Total)
	r := call(t, "GET", gw+"/api/transfer/raw-packages?executed_obs_unit_id=nope", s.Viewer, nil)
	require.Equal(t, 422, r.Status)
	require.Equal(t, "query.executed_obs_unit_id", problemOf(t, r).Errors[0].Location)

	type set struct {
		Items []string `json:"items"`
		Count int      `json:"count"`
	}
	inconsistent := func() set {
		r := call(t, "GET", gw+"/api/transfer/raw-data-package/inconsistent", s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var v set
		r.JSON(t, &v)
		return v
	}
	require.Equal(t, 0, inconsistent().Count)
	require.NoError(t, s.Redis.Client().SAdd(t.Context(), planner.InconsistentSet, pkgs[1].String(), pkgs[2].String()).Err())
	v := inconsistent()
	require.Equal(t, 2, v.Count)
	require.ElementsMatch(t, []string{pkgs[1].String(), pkgs[2].String()}, v.Items)
	r = call(t, "GET", gw+"/api/transfer/raw-data-package/inconsistent?limit=1", s.Viewer, nil)
	require.Equal(t, 200, r.Status)
	r.JSON(t, &v)
	require.Len(t, v.Items, 1)
	require.Equal(t, 2, v.Count)
	require.Equal(t, 422, call(t, "GET", gw+"/api/transfer/raw-data-package/inconsistent?limit=0", s.Viewer, nil).Status)
	require.Equal(t, 401, call(t, "GET", gw+"/api/transfer/raw-data-package/inconsistent", "", nil).Status)
	require.Equal(t, 200, call(t, "POST", gw+"/api/transfer/raw-data-package/reconcile-inconsistent", s.AdminJWT, nil).Status)
	require.Equal(t, 0, inconsistent().Count, "reconciling drains the set")
}
