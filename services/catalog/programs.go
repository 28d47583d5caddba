package catalog

import (
	"context"
	"slices"
	"strings"
)

// ListPrograms returns one page of the programs, sorted by short name; PI and Q are matched
// without surrounding spaces.
func (s *Service) ListPrograms(ctx context.Context, q ProgramQuery) (Page[Program], error) {
	q.PI, q.Q = strings.TrimSpace(q.PI), strings.TrimSpace(q.Q)
	return s.Store.ListPrograms(ctx, q)
}

// GetProgram returns one program with its obs units and their time accounting (accounting.go).
func (s *Service) GetProgram(ctx context.Context, id int64) (Program, error) {
	p, err := s.Store.GetProgram(ctx, id)
	if err != nil {
		return Program{}, err
	}
	return p, s.account(ctx, &p)
}

// CreateProgram checks and stores a new program with its obs units, created by the caller, who
// becomes its PI unless an admin names another (owners.go).
func (s *Service) CreateProgram(ctx context.Context, caller Caller, spec ProgramSpec) (Program, error) {
	spec.PIUsername = strings.TrimSpace(spec.PIUsername)
	if err := ownersForCreate(caller, &spec); err != nil {
		return Program{}, err
	}
	if err := spec.Normalize(); err != nil {
		return Program{}, err
	}
	if spec.Members == nil {
		spec.Members = []string{}
	}
	return s.Store.CreateProgram(ctx, spec, caller.Name)
}

// ProgramBuilder makes the new state of a program from its current one (read under the
// program's row lock when the store calls it): the body to write, or why not.
type ProgramBuilder func(cur Program) (ProgramSpec, error)

// UpdateProgram replaces a program (PUT): the required fields as given, obs_units, members and
// pi_username kept when left out. Units it drops are deleted under the rule of deletes.go:
// refused (409 naming the executions) while executions reference them. Who may change what is
// MayReplace's (owners.go).
func (s *Service) UpdateProgram(ctx context.Context, caller Caller, id int64, r ProgramReplacement) (Program, error) {
	given := r.Spec()
	return s.replaceProgram(ctx, caller, id, func(cur Program) (ProgramSpec, error) {
		spec := given
		spec.Members = slices.Clone(given.Members)
		if spec.PIUsername = strings.TrimSpace(spec.PIUsername); spec.PIUsername == "" {
			spec.PIUsername = cur.PIUsername
		}
		if spec.Members == nil {
			spec.Members = slices.Clone(cur.Members)
		}
		if err := spec.Normalize(); err != nil {
			return ProgramSpec{}, err
		}
		return spec, nil
	})
}

// PatchProgram applies a JSON merge patch to a program (PATCH; patch.go), under the same rules
// as UpdateProgram.
func (s *Service) PatchProgram(ctx context.Context, caller Caller, id int64, patch ProgramPatch) (Program, error) {
	return s.replaceProgram(ctx, caller, id, patch.Apply)
}

// replaceProgram writes what build makes of the program: checked against the caller's rights
// first on the program as read now (a refusal fences nothing in ingest), then again inside the
// write's transaction on the program as locked there.
func (s *Service) replaceProgram(ctx context.Context, caller Caller, id int64, build ProgramBuilder) (Program, error) {
	cur, err := s.Store.GetProgram(ctx, id)
	if err != nil {
		return Program{}, err
	}
	if err := requireAction(caller, cur, ActUnits, "path.id"); err != nil {
		return Program{}, err
	}
	next, err := build(cur)
	if err != nil {
		return Program{}, err
	}
	if err := MayReplace(caller, cur, next); err != nil {
		return Program{}, err
	}
	var dropped []int64
	if next.ObsUnits != nil {
		keep := map[string]bool{}
		for _, u := range next.ObsUnits {
			keep[u.Name] = true
		}
		for _, u := range cur.ObsUnits {
			if !keep[u.Name] {
				dropped = append(dropped, u.ID)
			}
		}
	}
	var out Program
	err = s.deletingUnits(ctx, dropped, "body.obs_units", func(ctx context.Context, guard DeleteGuard) error {
		var err error
		out, err = s.Store.ReplaceProgram(ctx, id, func(cur Program) (ProgramSpec, error) {
			next, err := build(cur)
			if err != nil {
				return ProgramSpec{}, err
			}
			return next, MayReplace(caller, cur, next)
		}, guard)
		return err
	})
	return out, err
}

// DeleteProgram deletes a program and its obs units (its PI or an admin) under the rule of
// deletes.go: refused (409 naming the executions) while executions — committed or buffered —
// reference its obs units.
func (s *Service) DeleteProgram(ctx context.Context, caller Caller, id int64) error {
	p, err := s.Store.GetProgram(ctx, id)
	if err != nil {
		return err
	}
	if err := requireAction(caller, p, ActDelete, "path.id"); err != nil {
		return err
	}
	ids := make([]int64, len(p.ObsUnits))
	for i, u := range p.ObsUnits {
		ids[i] = u.ID
	}
	return s.deletingUnits(ctx, ids, "path.id", func(ctx context.Context, guard DeleteGuard) error {
		return s.Store.DeleteProgram(ctx, id, func(cur Program) error {
			return requireAction(caller, cur, ActDelete, "path.id")
		}, guard)
	})
}
