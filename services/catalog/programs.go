package catalog

import (
	"context"
	"strings"
)

// ListPrograms returns one page of the programs, sorted by short name; PI and Q are matched
// without surrounding spaces.
func (s *Service) ListPrograms(ctx context.Context, q ProgramQuery) (Page[Program], error) {
	q.PI, q.Q = strings.TrimSpace(q.PI), strings.TrimSpace(q.Q)
	return s.Store.ListPrograms(ctx, q)
}

// GetProgram returns one program with its obs units.
func (s *Service) GetProgram(ctx context.Context, id int64) (Program, error) {
	return s.Store.GetProgram(ctx, id)
}

// CreateProgram checks and stores a new program with its obs units, created by the caller.
func (s *Service) CreateProgram(ctx context.Context, caller Caller, spec ProgramSpec) (Program, error) {
	if err := spec.Normalize(); err != nil {
		return Program{}, err
	}
	return s.Store.CreateProgram(ctx, spec, caller.Name)
}

// UpdateProgram checks a program body and replaces the program's fields and, when the body
// lists obs units, its units (matched by name). Units it drops are deleted under the rule of
// deletes.go: refused (409 naming the executions) while executions reference them.
func (s *Service) UpdateProgram(ctx context.Context, _ Caller, id int64, spec ProgramSpec) (Program, error) {
	if err := spec.Normalize(); err != nil {
		return Program{}, err
	}
	var dropped []int64
	if spec.ObsUnits != nil {
		cur, err := s.Store.GetProgram(ctx, id)
		if err != nil {
			return Program{}, err
		}
		keep := map[string]bool{}
		for _, u := range spec.ObsUnits {
			keep[u.Name] = true
		}
		for _, u := range cur.ObsUnits {
			if !keep[u.Name] {
				dropped = append(dropped, u.ID)
			}
		}
	}
	var out Program
	err := s.deletingUnits(ctx, dropped, "body.obs_units", func(ctx context.Context, guard DeleteGuard) error {
		var err error
		out, err = s.Store.ReplaceProgram(ctx, id, spec, guard)
		return err
	})
	return out, err
}

// DeleteProgram deletes a program and its obs units under the rule of deletes.go: refused (409
// naming the executions) while executions — committed or buffered — reference its obs units.
func (s *Service) DeleteProgram(ctx context.Context, _ Caller, id int64) error {
	p, err := s.Store.GetProgram(ctx, id)
	if err != nil {
		return err
	}
	ids := make([]int64, len(p.ObsUnits))
	for i, u := range p.ObsUnits {
		ids[i] = u.ID
	}
	return s.deletingUnits(ctx, ids, "path.id", func(ctx context.Context, guard DeleteGuard) error {
		return s.Store.DeleteProgram(ctx, id, guard)
	})
}
