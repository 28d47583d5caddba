package catalog

import (
	"context"
	"math"
	"time"
)

// Program time accounting (issue 26): the time a program and each of its obs units has been
// executed, against what it was given. Executed time is the sum of end_time − start_time of the
// obs unit's executions with status completed as the ingest service committed them to
// executed_obs_units (read directly, decisions §42). A start or finish that ingest acknowledged
// but still holds in its Redis buffer counts once its worker commits it (normally within
// seconds) — reported meanwhile as pending (pending_s, pending_hours), asked of ingest;
// running, failed and aborted executions never count.

// PendingExecutions asks ingest for the completed executions it acknowledged and still holds in
// its buffer, by obs unit (ingestclient; contract.ObsUnitPendingPath).
type PendingExecutions interface {
	Pending(ctx context.Context, obsUnitIDs []int64) (map[int64]ExecutedTime, error)
}

// PendingTimeout bounds the question to ingest: past it, or with ingest unreachable, the program
// is answered without its pending time.
const PendingTimeout = 2 * time.Second

// ObsUnitTime is an obs unit's executed and remaining time (GET /observing_program/{id} and
// GET /visibility/now; absent from the program lists and the writes' answers).
type ObsUnitTime struct {
	ExecutedS           *float64 `json:"executed_s,omitempty" doc:"Seconds of its completed executions committed by ingest (a finish still in ingest's buffer counts once committed). Only in GET /observing_program/{id}."`
	RemainingS          *float64 `json:"remaining_s,omitempty" doc:"duration_s minus executed_s, never below 0. Only in GET /observing_program/{id}."`
	CompletedExecutions *int     `json:"completed_executions,omitempty" doc:"How many completed executions executed_s sums. Only in GET /observing_program/{id}."`
	PendingS            *float64 `json:"pending_s,omitempty" doc:"Seconds of completed executions ingest acknowledged and still holds in its buffer: counted in executed_s once committed (normally within seconds). Absent when ingest could not be asked. Only in GET /observing_program/{id}."`
}

// ProgramTime is a program's executed hours against its allocation.
type ProgramTime struct {
	ExecutedHours  *float64 `json:"executed_hours,omitempty" doc:"Hours of its obs units' completed executions committed by ingest (the sum of their executed_s). Only in GET /observing_program/{id}."`
	RemainingHours *float64 `json:"remaining_hours,omitempty" doc:"allocated_hours minus executed_hours (negative: over its allocation); absent without allocated_hours. Only in GET /observing_program/{id}."`
	PendingHours   *float64 `json:"pending_hours,omitempty" doc:"Hours of completed executions still in ingest's buffer (the sum of pending_s), not yet in executed_hours. Absent when ingest could not be asked. Only in GET /observing_program/{id}."`
}

// ExecutedTime is the committed, completed execution time of one obs unit (Store.ExecutedTime).
type ExecutedTime struct {
	Seconds   float64
	Completed int
}

// unitTime is an obs unit's accounting from its duration and executed time.
func unitTime(durationS float64, x ExecutedTime) ObsUnitTime {
	executed := x.Seconds
	remaining := math.Max(0, durationS-executed)
	n := x.Completed
	return ObsUnitTime{ExecutedS: &executed, RemainingS: &remaining, CompletedExecutions: &n}
}

// programTime is a program's accounting from its allocation and its units' executed seconds.
func programTime(allocated *float64, executedS float64) ProgramTime {
	h := executedS / 3600
	t := ProgramTime{ExecutedHours: &h}
	if allocated != nil {
		r := *allocated - h
		t.RemainingHours = &r
	}
	return t
}

// account fills in a program's time accounting.
func (s *Service) account(ctx context.Context, p *Program) error {
	ids := make([]int64, len(p.ObsUnits))
	for i, u := range p.ObsUnits {
		ids[i] = u.ID
	}
	done, err := s.Store.ExecutedTime(ctx, ids)
	if err != nil {
		return err
	}
	total := 0.0
	for i := range p.ObsUnits {
		u := &p.ObsUnits[i]
		u.ObsUnitTime = unitTime(u.DurationS, done[u.ID])
		total += done[u.ID].Seconds
	}
	p.ProgramTime = programTime(p.AllocatedHours, total)
	s.addPending(ctx, p, ids)
	return nil
}

// addPending adds what ingest still holds in its buffer (pending_s, pending_hours); left out when
// ingest cannot be asked within PendingTimeout: the committed figures stand on their own.
func (s *Service) addPending(ctx context.Context, p *Program, ids []int64) {
	if s.Pending == nil || len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, PendingTimeout)
	defer cancel()
	pend, err := s.Pending.Pending(ctx, ids)
	if err != nil {
		if s.Log != nil {
			s.Log.WarnContext(ctx, "program time: ingest's pending executions not read", "program", p.ID, "error", err)
		}
		return
	}
	total := 0.0
	for i := range p.ObsUnits {
		u := &p.ObsUnits[i]
		v := pend[u.ID].Seconds
		u.PendingS = &v
		total += v
	}
	h := total / 3600
	p.PendingHours = &h
}
