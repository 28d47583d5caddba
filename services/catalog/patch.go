package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/obsops/obsops/pkg/problem"
)

// ProgramPatch is the body of PATCH /observing_program/{id}: a JSON merge patch (RFC 7396,
// application/merge-patch+json) of the program as PUT takes it. A field left out is unchanged; a
// field given replaces the stored value; null removes an optional field (description: empty,
// allocated_hours: none, members: none, obs_units: none). Arrays are not merged: obs_units and
// members given replace the stored lists (obs units matched by name keep their ids, as with
// PUT). Required fields (short_name, title, pi, status, pi_username) cannot be removed.
type ProgramPatch struct {
	ShortName      string        `json:"short_name,omitempty" minLength:"1" maxLength:"64"`
	Title          string        `json:"title,omitempty" minLength:"1" maxLength:"500"`
	PI             string        `json:"pi,omitempty" minLength:"1" maxLength:"255"`
	PIUsername     string        `json:"pi_username,omitempty" minLength:"1" maxLength:"255" doc:"Hands the program over (its PI or an admin)."`
	Members        []string      `json:"members,omitempty" maxItems:"100" nullable:"true" doc:"Replaces the members; null or [] removes them all."`
	Description    *string       `json:"description,omitempty" maxLength:"20000" nullable:"true" doc:"null: empty."`
	Status         string        `json:"status,omitempty" enum:"draft,active,completed,archived"`
	AllocatedHours *float64      `json:"allocated_hours,omitempty" minimum:"0" maximum:"100000" nullable:"true" doc:"null: none."`
	ObsUnits       []ObsUnitSpec `json:"obs_units,omitempty" maxItems:"500" nullable:"true" doc:"Replaces the whole list (units matched by name keep their ids); null or [] deletes every unit."`

	raw []byte // the patch as sent: presence and null are what a merge patch says
}

// UnmarshalJSON keeps the patch document besides its fields.
func (p *ProgramPatch) UnmarshalJSON(b []byte) error {
	type plain ProgramPatch
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = ProgramPatch(v)
	p.raw = bytes.Clone(b)
	return nil
}

// NewProgramPatch returns the patch of a merge-patch document (tests, tools).
func NewProgramPatch(doc []byte) (ProgramPatch, error) {
	var p ProgramPatch
	err := json.Unmarshal(doc, &p)
	return p, err
}

// Apply merges the patch into program cur (RFC 7396) and returns the resulting program body,
// normalized; its ObsUnits are nil (unchanged) when the patch does not name obs_units.
func (p ProgramPatch) Apply(cur Program) (ProgramSpec, error) {
	var patch map[string]any
	if err := json.Unmarshal(p.raw, &patch); err != nil || patch == nil {
		return ProgramSpec{}, problem.Field("body", "a merge patch of a program is a JSON object", nil)
	}
	units := make([]ObsUnitSpec, len(cur.ObsUnits))
	for i, u := range cur.ObsUnits {
		units[i] = ObsUnitSpec{Name: u.Name, SourceID: u.SourceID, InstrumentModuleID: u.InstrumentModuleID,
			DurationS: u.DurationS, MinElevationDeg: u.MinElevationDeg, Priority: u.Priority, ObsUnitConstraints: u.ObsUnitConstraints}
	}
	base := ProgramSpec{ShortName: cur.ShortName, Title: cur.Title, PI: cur.PI, PIUsername: cur.PIUsername,
		Members: cur.Members, Description: cur.Description, Status: cur.Status, AllocatedHours: cur.AllocatedHours, ObsUnits: units}
	var doc map[string]any
	b, err := json.Marshal(base)
	if err != nil {
		return ProgramSpec{}, err
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return ProgramSpec{}, err
	}
	merged, _ := mergePatch(doc, patch).(map[string]any)
	for _, f := range []string{"short_name", "title", "pi", "status"} {
		if v, ok := merged[f]; !ok || v == nil {
			return ProgramSpec{}, problem.Field("body."+f, "required: a program's "+f+" cannot be removed", nil)
		}
	}
	if _, ok := merged["pi_username"]; !ok && cur.PIUsername != "" {
		return ProgramSpec{}, problem.Field("body.pi_username", "required: a program's PI cannot be removed (hand it over instead)", nil)
	}
	b, err = json.Marshal(merged)
	if err != nil {
		return ProgramSpec{}, err
	}
	var out ProgramSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return ProgramSpec{}, problem.Field("body", fmt.Sprintf("the patched program is not valid: %v", err), nil)
	}
	if out.Members == nil {
		out.Members = []string{}
	}
	if _, ok := patch["obs_units"]; !ok {
		out.ObsUnits = nil // unchanged: not rewritten
	} else if out.ObsUnits == nil {
		out.ObsUnits = []ObsUnitSpec{}
	}
	if err := out.Normalize(); err != nil {
		return ProgramSpec{}, err
	}
	return out, nil
}

// mergePatch is RFC 7396's MergePatch(target, patch): an object patch merges member by member
// (null removes), anything else — arrays included — replaces the target.
func mergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
		} else {
			tm[k] = mergePatch(tm[k], v)
		}
	}
	return tm
}
