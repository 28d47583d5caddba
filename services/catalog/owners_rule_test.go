package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/catalog"
)

// TestMayChange is the ownership rule as a table: PI everything, member obs units only, admin
// everything, others and programs without a PI nothing.
func TestMayChange(t *testing.T) {
	owned := catalog.Owners{PIUsername: "ann", Members: []string{"max"}}
	all := []catalog.Action{catalog.ActUnits, catalog.ActEdit, catalog.ActMembers, catalog.ActDelete}
	for _, a := range all {
		require.True(t, catalog.MayChange(catalog.Caller{Name: "ann"}, owned, a), "PI: %s", a)
		require.True(t, catalog.MayChange(catalog.Caller{Name: "root", Admin: true}, owned, a), "admin: %s", a)
		require.Equal(t, a == catalog.ActUnits, catalog.MayChange(catalog.Caller{Name: "max"}, owned, a), "member: %s", a)
		require.False(t, catalog.MayChange(catalog.Caller{Name: "bob"}, owned, a), "other: %s", a)
		require.False(t, catalog.MayChange(catalog.Caller{}, owned, a), "nobody: %s", a)
		require.False(t, catalog.MayChange(catalog.Caller{Name: ""}, catalog.Owners{}, a), "no PI, no name: %s", a)
		require.False(t, catalog.MayChange(catalog.Caller{Name: "ann"}, catalog.Owners{Members: []string{"ann"}}, a), "no PI: %s", a)
		require.True(t, catalog.MayChange(catalog.Caller{Name: "root", Admin: true}, catalog.Owners{}, a), "no PI, admin: %s", a)
	}
}

// TestProgramPatchApply: RFC 7396 on a program — one field changed, null removes an optional
// field, arrays replace, required fields cannot be removed.
func TestProgramPatchApply(t *testing.T) {
	hours := 4.0
	cur := catalog.Program{ID: 1, ShortName: "P", Title: "T", PI: "Dr P", PIUsername: "ann", Members: []string{"max"},
		Description: "d", Status: "active", AllocatedHours: &hours,
		ObsUnits: []catalog.ObsUnit{{ID: 7, Name: "u", SourceID: 3, InstrumentModuleID: 11, DurationS: 60}}}
	apply := func(doc string) (catalog.ProgramSpec, error) {
		p, err := catalog.NewProgramPatch([]byte(doc))
		require.NoError(t, err)
		return p.Apply(cur)
	}
	got, err := apply(`{"title": "New"}`)
	require.NoError(t, err)
	require.Equal(t, catalog.ProgramSpec{ShortName: "P", Title: "New", PI: "Dr P", PIUsername: "ann", Members: []string{"max"},
		Description: "d", Status: "active", AllocatedHours: &hours}, got, "obs units nil: unchanged")
	got, err = apply(`{"allocated_hours": null, "description": null, "members": null}`)
	require.NoError(t, err)
	require.Nil(t, got.AllocatedHours)
	require.Empty(t, got.Description)
	require.Equal(t, []string{}, got.Members)
	got, err = apply(`{"obs_units": [{"name": "v", "source_id": 3, "instrument_module_id": 12, "duration_s": 5}]}`)
	require.NoError(t, err)
	require.Equal(t, []catalog.ObsUnitSpec{{Name: "v", SourceID: 3, InstrumentModuleID: 12, DurationS: 5}}, got.ObsUnits)
	got, err = apply(`{"obs_units": null}`)
	require.NoError(t, err)
	require.Equal(t, []catalog.ObsUnitSpec{}, got.ObsUnits)
	for _, f := range []string{"short_name", "title", "pi", "status", "pi_username"} {
		_, err = apply(`{"` + f + `": null}`)
		require.ErrorContains(t, err, "body."+f)
	}
}
