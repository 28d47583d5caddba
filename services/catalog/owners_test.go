package catalog_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// ownedProgram is a program as read, with its owners.
type ownedProgram struct {
	ID             int64     `json:"id"`
	ShortName      string    `json:"short_name"`
	Title          string    `json:"title"`
	PI             string    `json:"pi"`
	PIUsername     string    `json:"pi_username"`
	Members        []string  `json:"members"`
	Description    string    `json:"description"`
	Status         string    `json:"status"`
	AllocatedHours *float64  `json:"allocated_hours"`
	ObsUnits       []obsUnit `json:"obs_units"`
}

// patch sends a merge patch (application/merge-patch+json).
func (e *env) patch(t *testing.T, url, bearer string, doc string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPatch, url, bytes.NewBufferString(doc))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := e.c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

func (e *env) readProgram(t *testing.T, id int64) ownedProgram {
	t.Helper()
	r := e.call(t, http.MethodGet, e.gw(fmt.Sprintf("/observing_program/%d", id)), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p ownedProgram
	r.JSON(t, &p)
	return p
}

// TestProgramOwners: who may change which program (catalog.MayChange), through the gateway with
// session JWTs: A (oscar) is the PI, M (mia) a member, B (bob) another observer.
func TestProgramOwners(t *testing.T) {
	e := startEnv(t, nil)
	bob, mia := e.s.JWT(t, "bob", "observer"), e.s.JWT(t, "mia", "observer")
	src := e.createSource(t, map[string]any{"name": "Owned target", "kind": "fixed", "ra_deg": 40.0, "dec_deg": -10.0})

	// Created by oscar: he is the PI; members as given; an observer cannot name another PI.
	body := e.programBody("OWN-1", unit("u1", src, 11, 600))
	body["members"] = []string{"mia"}
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p ownedProgram
	r.JSON(t, &p)
	require.Equal(t, "oscar", p.PIUsername)
	require.Equal(t, []string{"mia"}, p.Members)
	path := e.gw(fmt.Sprintf("/observing_program/%d", p.ID))
	other := e.programBody("OWN-X")
	other["pi_username"] = "bob"
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, other), http.StatusForbidden, "body.pi_username")
	dup := e.programBody("OWN-X")
	dup["members"] = []string{"mia", "oscar"}
	requireProblem(t, e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, dup), http.StatusUnprocessableEntity, "body.members[1]")
	// An admin names the PI.
	r = e.call(t, http.MethodPost, e.gw("/observing_program/"), e.admin, other)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var bobs ownedProgram
	r.JSON(t, &bobs)
	require.Equal(t, "bob", bobs.PIUsername)

	t.Run("others are refused", func(t *testing.T) {
		edit := e.programBody("OWN-1", unit("u1", src, 11, 600))
		edit["title"] = "Taken over"
		requireProblem(t, e.call(t, http.MethodPut, path, bob, edit), http.StatusForbidden, "path.id")
		requireProblem(t, e.patch(t, path, bob, `{"title": "Taken over"}`), http.StatusForbidden, "path.id")
		requireProblem(t, e.patch(t, path, bob, `{"obs_units": [{"name": "b", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 11, "duration_s": 5}]}`), http.StatusForbidden, "path.id")
		requireProblem(t, e.call(t, http.MethodDelete, path, bob, nil), http.StatusForbidden, "path.id")
		requireProblem(t, e.patch(t, path, e.viewer, `{"title": "x"}`), http.StatusForbidden, "")
		// bob's own program is his.
		require.Equal(t, http.StatusOK, e.patch(t, e.gw(fmt.Sprintf("/observing_program/%d", bobs.ID)), bob, `{"title": "Bob's"}`).Status)
		got := e.readProgram(t, p.ID)
		require.Equal(t, p.Title, got.Title, "nothing changed")
		require.Len(t, got.ObsUnits, 1)
	})

	t.Run("a member changes obs units only", func(t *testing.T) {
		r := e.patch(t, path, mia, `{"obs_units": [{"name": "u1", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 11, "duration_s": 900},
			{"name": "u2", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 12, "duration_s": 60}]}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var got ownedProgram
		r.JSON(t, &got)
		require.Len(t, got.ObsUnits, 2)
		require.Equal(t, p.ObsUnits[0].ID, got.ObsUnits[0].ID, "matched by name: id kept")
		require.Equal(t, 900.0, got.ObsUnits[0].DurationS)
		// A PUT with the program's fields as they are and other units: fine too.
		same := e.programBody("OWN-1", unit("u1", src, 11, 900))
		require.Equal(t, http.StatusOK, e.call(t, http.MethodPut, path, mia, same).Status)

		requireProblem(t, e.patch(t, path, mia, `{"title": "Mine now"}`), http.StatusForbidden, "body.title")
		changed := e.programBody("OWN-1", unit("u1", src, 11, 900))
		changed["status"] = "completed"
		requireProblem(t, e.call(t, http.MethodPut, path, mia, changed), http.StatusForbidden, "body.status")
		requireProblem(t, e.patch(t, path, mia, `{"members": ["mia", "bob"]}`), http.StatusForbidden, "body.members")
		requireProblem(t, e.patch(t, path, mia, `{"pi_username": "bob"}`), http.StatusForbidden, "body.pi_username")
		requireProblem(t, e.call(t, http.MethodDelete, path, mia, nil), http.StatusForbidden, "path.id")
		got = e.readProgram(t, p.ID)
		require.Equal(t, p.Title, got.Title)
		require.Equal(t, "active", got.Status)
		require.Equal(t, []string{"mia"}, got.Members)
	})

	t.Run("sources follow the programs using them", func(t *testing.T) {
		srcBody := map[string]any{"name": "Owned target", "kind": "fixed", "ra_deg": 41.0, "dec_deg": -10.0}
		requireProblem(t, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", src)), bob, srcBody), http.StatusForbidden, "path.id")
		requireProblem(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", src)), bob, nil), http.StatusForbidden, "path.id")
		r := e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", src)), mia, srcBody)
		require.Equal(t, http.StatusOK, r.Status, "a member changes the program's sources: %s", r.Body)
		// bob's program uses the source too: now only someone in both programs (or an admin) may change it.
		require.Equal(t, http.StatusOK, e.patch(t, e.gw(fmt.Sprintf("/observing_program/%d", bobs.ID)), bob,
			`{"obs_units": [{"name": "b1", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 11, "duration_s": 5}]}`).Status,
			"referencing another user's source needs no right over it")
		srcBody["ra_deg"] = 42.0
		requireProblem(t, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", src)), e.observer, srcBody), http.StatusForbidden, "path.id")
		require.Equal(t, http.StatusOK, e.call(t, http.MethodPut, e.gw(fmt.Sprintf("/sources/%d", src)), e.admin, srcBody).Status)
		// A source nobody uses: its creator's.
		lone := e.createSource(t, map[string]any{"name": "Lone target", "kind": "fixed", "ra_deg": 1.0, "dec_deg": 1.0})
		requireProblem(t, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", lone)), bob, nil), http.StatusForbidden, "path.id")
		require.Equal(t, http.StatusNoContent, e.call(t, http.MethodDelete, e.gw(fmt.Sprintf("/sources/%d", lone)), e.observer, nil).Status)
	})

	t.Run("the PI manages members", func(t *testing.T) {
		r := e.patch(t, path, e.observer, `{"members": ["bob", "mia"]}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.Equal(t, []string{"bob", "mia"}, e.readProgram(t, p.ID).Members)
		// bob is a member now: obs units yes, fields no.
		require.Equal(t, http.StatusOK, e.patch(t, path, bob, `{"obs_units": [{"name": "u1", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 11, "duration_s": 30}]}`).Status)
		requireProblem(t, e.patch(t, path, bob, `{"description": "x"}`), http.StatusForbidden, "body.description")
		// null removes the members; a PUT leaving members out keeps them.
		require.Equal(t, http.StatusOK, e.patch(t, path, e.observer, `{"members": ["mia"]}`).Status)
		require.Equal(t, http.StatusOK, e.call(t, http.MethodPut, path, e.observer, e.programBody("OWN-1")).Status)
		require.Equal(t, []string{"mia"}, e.readProgram(t, p.ID).Members)
		require.Equal(t, http.StatusOK, e.patch(t, path, e.observer, `{"members": null}`).Status)
		require.Empty(t, e.readProgram(t, p.ID).Members)
		requireProblem(t, e.patch(t, path, e.observer, `{"members": ["oscar"]}`), http.StatusUnprocessableEntity, "body.members[0]")
		requireProblem(t, e.patch(t, path, mia, `{"obs_units": []}`), http.StatusForbidden, "path.id")
	})

	t.Run("an admin may do all", func(t *testing.T) {
		require.Equal(t, http.StatusOK, e.patch(t, path, e.admin, `{"title": "Admin's title", "members": ["vera"], "pi_username": "mia"}`).Status)
		got := e.readProgram(t, p.ID)
		require.Equal(t, "mia", got.PIUsername)
		require.Equal(t, []string{"vera"}, got.Members)
		// mia is the PI now, oscar nobody.
		requireProblem(t, e.patch(t, path, e.observer, `{"title": "x"}`), http.StatusForbidden, "path.id")
		require.Equal(t, http.StatusOK, e.patch(t, path, mia, `{"title": "Mia's"}`).Status)
		require.Equal(t, http.StatusNoContent, e.call(t, http.MethodDelete, path, e.admin, nil).Status)
	})

	t.Run("a program no user created is admins' only", func(t *testing.T) {
		var id int64
		require.NoError(t, e.db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi) VALUES ('LEGACY', 'Legacy', 'Old PI') RETURNING id`).Scan(&id))
		lp := e.gw(fmt.Sprintf("/observing_program/%d", id))
		requireProblem(t, e.patch(t, lp, e.observer, `{"title": "x"}`), http.StatusForbidden, "path.id")
		require.Equal(t, http.StatusOK, e.patch(t, lp, e.admin, `{"title": "Kept by admins"}`).Status)
		require.Empty(t, e.readProgram(t, id).PIUsername)
		// The database holds the rule: a program a user created has a PI.
		_, err := e.db.Exec(`INSERT INTO observing_programs (short_name, title, pi, created_by) VALUES ('NOPI', 't', 'p', 'oscar')`)
		require.ErrorContains(t, err, "observing_programs_pi_username_set")
		_, err = e.db.Exec(`INSERT INTO observing_program_members (program_id, username) VALUES ($1, 'x'), ($1, 'x')`, id)
		require.ErrorContains(t, err, "duplicate key")
	})
}

// TestProgramPutAndPatch: PUT is a full replacement whose required fields are required; PATCH
// is a JSON merge patch.
func TestProgramPutAndPatch(t *testing.T) {
	e := startEnv(t, nil)
	src := e.createSource(t, map[string]any{"name": "Patch target", "kind": "fixed", "ra_deg": 50.0, "dec_deg": 5.0})
	body := e.programBody("PATCH-1", unit("a", src, 11, 100), unit("b", src, 12, 200))
	body["description"] = "Long text"
	r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p ownedProgram
	r.JSON(t, &p)
	path := e.gw(fmt.Sprintf("/observing_program/%d", p.ID))

	t.Run("PUT without a required field is 422 naming it", func(t *testing.T) {
		for _, field := range []string{"short_name", "title", "pi", "status"} {
			b := e.programBody("PATCH-1")
			delete(b, "obs_units")
			delete(b, field)
			pr := requireProblem(t, e.call(t, http.MethodPut, path, e.observer, b), http.StatusUnprocessableEntity, "body")
			require.Contains(t, pr.Detail, "expected required property "+field, "names %s", field)
		}
		require.Equal(t, p, e.readProgram(t, p.ID), "nothing changed")
	})

	t.Run("PATCH changes what it names", func(t *testing.T) {
		r := e.patch(t, path, e.observer, `{"title": "New title"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var got ownedProgram
		r.JSON(t, &got)
		want := p
		want.Title = "New title"
		require.Equal(t, want, got, "one field changed, the others untouched (obs units with their ids)")

		// null removes an optional field.
		r = e.patch(t, path, e.observer, `{"allocated_hours": null, "description": null}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		got = ownedProgram{}
		r.JSON(t, &got)
		require.Nil(t, got.AllocatedHours)
		require.Empty(t, got.Description)
		require.Equal(t, "New title", got.Title)
		require.Len(t, got.ObsUnits, 2)

		// Required fields cannot be removed; bad values are named; nothing changes.
		requireProblem(t, e.patch(t, path, e.observer, `{"title": null}`), http.StatusUnprocessableEntity, "body.title")
		requireProblem(t, e.patch(t, path, e.observer, `{"status": "done"}`), http.StatusUnprocessableEntity, "body.status")
		requireProblem(t, e.patch(t, path, e.observer, `{"colour": "red"}`), http.StatusUnprocessableEntity, "body.colour")
		requireProblem(t, e.patch(t, path, e.observer, `{"obs_units": [{"name": "a", "source_id": 999999, "instrument_module_id": 11, "duration_s": 1}]}`),
			http.StatusUnprocessableEntity, "body.obs_units[0].source_id")
		require.Equal(t, got, e.readProgram(t, p.ID))

		// obs_units given replaces the list (by name: ids kept); null deletes them all.
		r = e.patch(t, path, e.observer, `{"obs_units": [{"name": "b", "source_id": `+fmt.Sprint(src)+`, "instrument_module_id": 12, "duration_s": 250}]}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		got = ownedProgram{}
		r.JSON(t, &got)
		require.Len(t, got.ObsUnits, 1)
		require.Equal(t, p.ObsUnits[1].ID, got.ObsUnits[0].ID)
		require.Equal(t, 250.0, got.ObsUnits[0].DurationS)
		r = e.patch(t, path, e.observer, `{"obs_units": null, "allocated_hours": 3}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		got = ownedProgram{}
		r.JSON(t, &got)
		require.Empty(t, got.ObsUnits)
		require.Equal(t, 3.0, *got.AllocatedHours)

		// Plain application/json is taken as a merge patch too.
		raw, _ := json.Marshal(map[string]any{"pi": "Dr. O"})
		req, _ := http.NewRequest(http.MethodPatch, path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.observer)
		resp, err := e.c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "Dr. O", e.readProgram(t, p.ID).PI)
		requireProblem(t, e.patch(t, e.gw("/observing_program/999999"), e.observer, `{"title": "x"}`), http.StatusNotFound, "")
	})
}
