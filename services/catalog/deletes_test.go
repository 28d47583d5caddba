package catalog_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestDeletesNeedIngest: with ingest unreachable the catalog cannot know whether a buffered start
// references an obs unit, so it deletes none (503 with Retry-After, nothing changed) — deleting
// the program or dropping the unit in a PUT alike; changes that delete no obs unit do not need
// ingest. (The end-to-end cases with ingest — buffered and committed executions, the race — are
// in services/ingest/deletes_test.go.)
func TestDeletesNeedIngest(t *testing.T) {
	e := startEnv(t, map[string]string{"OPS_INGEST_URL": "http://" + testenv.FreeAddr(t)})
	src := e.createSource(t, map[string]any{"name": "Fenced target", "kind": "fixed", "ra_deg": 10.0, "dec_deg": 10.0})
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("FENCED", unit("a", src, 11, 60), unit("b", src, 11, 60)))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p program
	r.JSON(t, &p)
	path := e.gw(fmt.Sprintf("/observing_program/%d", p.ID))

	r = e.call(t, http.MethodDelete, path, e.observer, nil)
	requireProblem(t, r, http.StatusServiceUnavailable, "")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	requireProblem(t, e.call(t, http.MethodPut, path, e.observer, e.programBody("FENCED", unit("a", src, 11, 60))), http.StatusServiceUnavailable, "")
	var got program
	e.call(t, http.MethodGet, path, e.viewer, nil).JSON(t, &got)
	require.Equal(t, p, got, "nothing changed")

	// A PUT keeping every unit, archiving the program, and a delete of a program without obs
	// units need no fence.
	b := e.programBody("FENCED", unit("a", src, 11, 60), unit("b", src, 11, 120))
	b["status"] = "archived"
	r = e.call(t, http.MethodPut, path, e.observer, b)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, e.programBody("EMPTY"))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var empty program
	r.JSON(t, &empty)
	require.Equal(t, http.StatusNoContent, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/observing_program/%d", empty.ID)), e.observer, nil).Status)
}
