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
// lists obs units, its units (matched by name).
func (s *Service) UpdateProgram(ctx context.Context, _ Caller, id int64, spec ProgramSpec) (Program, error) {
	if err := spec.Normalize(); err != nil {
		return Program{}, err
	}
	return s.Store.ReplaceProgram(ctx, id, spec)
}

// DeleteProgram deletes a program and its obs units (a conflict if any has executed observations).
func (s *Service) DeleteProgram(ctx context.Context, _ Caller, id int64) error {
	return s.Store.DeleteProgram(ctx, id)
}
