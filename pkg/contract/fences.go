package contract

// Obs-unit fences: how the catalog deletes obs units without making an acknowledged buffered
// start unappliable (issue 23, rule 4; docs/decisions.md "Deleting obs units: a fence in the
// ingest buffer"). Before deleting obs units the catalog asks ingest to fence them: ingest's hold
// script then refuses every new start of a fenced obs unit, and the fence answers, in the same
// Redis script, the buffered executions that reference them. The catalog deletes only when there
// are none (committed executions are refused by the foreign key), seals the fences into
// tombstones (starts of a deleted obs unit are refused for good) before it commits, and
// releases them when it does not delete. Every call carries the internal secret; the gateway
// never routes these paths.

// ObsUnitFencePath fences obs units (FenceRequest → FenceAnswer).
const ObsUnitFencePath = InternalPrefix + "/ingest/obs-unit-fences"

// ObsUnitSealPath turns a delete's fences into tombstones (FenceRequest → 204, or 409 when a
// fence was lost: expired or taken by another delete).
const ObsUnitSealPath = ObsUnitFencePath + "/seal"

// ObsUnitReleasePath removes a delete's fences and tombstones (FenceRequest → 204).
const ObsUnitReleasePath = ObsUnitFencePath + "/release"

// FenceRequest names one delete (its token, chosen by the catalog) and the obs units it fences.
type FenceRequest struct {
	Token      string  `json:"token" minLength:"16" maxLength:"64" doc:"Identifies one delete: only its own fences are sealed or released."`
	ObsUnitIDs []int64 `json:"obs_unit_ids" minItems:"1" maxItems:"10000"`
}

// FencedExecution is a buffered execution of a fenced obs unit.
type FencedExecution struct {
	ID        string `json:"id"`
	ObsUnitID int64  `json:"obs_unit_id"`
}

// FenceAnswer lists the buffered executions of the fenced obs units (none: they may be deleted).
type FenceAnswer struct {
	Executions []FencedExecution `json:"executions"`
}

// ObsUnitPendingPath answers the executions of obs units that ingest has acknowledged but not yet
// committed (PendingRequest → PendingAnswer): the catalog's time accounting reports them apart
// from the committed ones (docs/decisions.md §42). A read: it fences nothing.
const ObsUnitPendingPath = InternalPrefix + "/ingest/obs-unit-pending"

// PendingRequest names the obs units whose buffered executions are asked for.
type PendingRequest struct {
	ObsUnitIDs []int64 `json:"obs_unit_ids" minItems:"1" maxItems:"500"`
}

// PendingUnit is one obs unit's completed executions still in ingest's buffer: their count and
// summed end − start.
type PendingUnit struct {
	ObsUnitID  int64   `json:"obs_unit_id"`
	Seconds    float64 `json:"seconds"`
	Executions int     `json:"executions"`
}

// PendingAnswer lists the obs units with buffered completed executions (others are absent).
type PendingAnswer struct {
	Units []PendingUnit `json:"units"`
}
