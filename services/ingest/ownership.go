package ingest

import (
	"context"

	"strconv"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// Instruments own their records (docs/api.md, "Service accounts"): an instrument account's
// tokens start and finish executions, register and update files and create and finalize
// packages only of the instrument modules it is bound to; packages are also created and
// finalized by admins. The kind and bindings travel with the verified token (Caller.Service),
// so the check costs no lookup: a new record names its module in its body, an existing one's
// module is read by the lookup its write already makes (the execution at a finish, the file or
// package row locked by an update or finalize).

// OwnershipError is a write to records of an instrument module the caller does not own (403).
type OwnershipError struct {
	Loc    string // where the module is: body.instrument_module_id, or path.id for an existing record
	Module int64  // 0: the record names none
	Why    string
}

func (e *OwnershipError) Error() string {
	return e.Loc + ": " + e.Why
}

// ProblemKind makes it a 403 (problem.Kinded).
func (e *OwnershipError) ProblemKind() problem.Kind { return problem.Forbidden }

// ModuleCheck refuses the write of a record of instrument module m (nil: every module is allowed).
type ModuleCheck func(m int64) error

// check is the caller's ModuleCheck with the module's location loc in the request.
func (c Caller) check(loc string) ModuleCheck {
	return func(m int64) error { return c.mayWrite(m, loc) }
}

// mayWrite refuses (403 at loc) a write of a record of instrument module m (0: none named)
// unless the caller owns it: an admin may write any module's records, an instrument account
// its bound modules', anyone else none. No allocation when allowed (a bulk checks each file).
func (c Caller) mayWrite(m int64, loc string) error {
	switch {
	case c.Admin:
		return nil
	case c.Service == nil:
		return &OwnershipError{Loc: loc, Module: m, Why: "only an instrument's service account or an admin writes these records"}
	case c.Service.Kind != authn.KindInstrument:
		if c.Service.Kind == "" {
			return &OwnershipError{Loc: loc, Module: m, Why: "this service account has no kind yet; an admin gives it one (PUT /api/tokens/service/{username}/bindings)"}
		}
		return &OwnershipError{Loc: loc, Module: m, Why: "a " + c.Service.Kind + " account writes no instrument records"}
	case m == 0:
		return &OwnershipError{Loc: loc, Why: "an instrument account writes only records of its instrument modules: name the instrument_module_id"}
	}
	for _, b := range c.Service.Modules {
		if b == m {
			return nil
		}
	}
	return &OwnershipError{Loc: loc, Module: m, Why: "instrument module " + strconv.FormatInt(m, 10) + " is not bound to this instrument account"}
}

// owns is mayWrite for a module named in a request body: an unknown module stays the 422 it
// always was (its existence is looked up only on the way to a refusal, never when allowed).
func (s *Service) owns(ctx context.Context, c Caller, m int64, loc string) error {
	err := c.mayWrite(m, loc)
	if err == nil || m == 0 {
		return err
	}
	if e := s.checkModule(ctx, m, loc); e != nil {
		return e
	}
	return err
}
