package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/obsops/obsops/pkg/problem"
)

// Ownership of programs (issue 24, decisions §33). The access table (pkg/authn/access.go) lets
// observers and admins reach the write routes at all; which program a caller may change, and
// how, is decided here, once, by MayChange:
//
//   - the PI (pi_username) may do everything to the program: its fields, its members, its obs
//     units and the sources they use, deleting it, handing it to another PI;
//   - a member (a co-investigator) may change the program's obs units and the sources they use,
//     nothing else;
//   - an admin may do everything to every program;
//   - anybody else nothing (403). A program without a PI (seeded or legacy data that no user
//     created) is changed by admins only.
//
// Sources are shared: a source's name is unique over the whole catalogue, so programs of
// different users use the same source. Referencing a source from an obs unit needs no right over
// it. Changing or deleting one needs, besides an admin, the right to change the obs units of
// every program that uses it (changing it changes their observations), and for a source no
// program uses, being the one who created it (MaySourceChange).

// Action is what a write does to a program.
type Action string

// The actions on a program, from the weakest: every write to a program is at least ActUnits.
const (
	ActUnits   Action = "change the obs units and sources of"
	ActEdit    Action = "change the fields of"
	ActMembers Action = "change the members of"
	ActDelete  Action = "delete"
)

// MaxMembers bounds a program's members (co-investigators).
const MaxMembers = 100

// Owners are who a program belongs to: its PI and its members, by username.
type Owners struct {
	PIUsername string   // empty: nobody's (admins only)
	Members    []string // co-investigators
}

// Owners returns whom the program belongs to.
func (p Program) Owners() Owners { return Owners{PIUsername: p.PIUsername, Members: p.Members} }

// MayChange is the ownership rule: whether caller may do action a to a program owned by o.
func MayChange(c Caller, o Owners, a Action) bool {
	switch {
	case c.Admin:
		return true
	case c.Name == "" || o.PIUsername == "":
		return false
	case c.Name == o.PIUsername:
		return true
	}
	return a == ActUnits && slices.Contains(o.Members, c.Name)
}

// ForbiddenError is a write the caller may not make (403), naming the input that asked for it.
type ForbiddenError struct {
	Location string // path.id, body.members, body.pi_username, ...
	Message  string
}

// Error is the refusal, written for the client.
func (e *ForbiddenError) Error() string { return e.Message }

// ProblemKind makes it a 403 (problem.Kinded).
func (e *ForbiddenError) ProblemKind() problem.Kind { return problem.Forbidden }

// Unwrap gives the 403 with its input in errors[].
func (e *ForbiddenError) Unwrap() error {
	var details []problem.Detail
	if e.Location != "" {
		details = append(details, problem.Detail{Location: e.Location, Message: e.Message})
	}
	return problem.Forbidden.New(e.Message, details...)
}

// requireAction refuses action a on program p unless MayChange allows it.
func requireAction(c Caller, p Program, a Action, loc string) error {
	if MayChange(c, p.Owners(), a) {
		return nil
	}
	who := "only its PI or an admin may"
	switch {
	case p.PIUsername == "":
		who = "it has no PI: only an admin may"
	case a == ActUnits:
		who = "only its PI, its members or an admin may"
	}
	return &ForbiddenError{Location: loc, Message: fmt.Sprintf("%s is not allowed to %s program %d (%s): %s %s it",
		callerName(c), a, p.ID, p.ShortName, who, a)}
}

func callerName(c Caller) string {
	if c.Name == "" {
		return "the caller"
	}
	return fmt.Sprintf("user %q", c.Name)
}

// MayReplace checks that caller may turn program cur into next: every write needs ActUnits, a
// change of the program's own fields or of its PI ActEdit, a change of its members ActMembers.
// next's nil obs units and members mean unchanged.
func MayReplace(c Caller, cur Program, next ProgramSpec) error {
	if err := requireAction(c, cur, ActUnits, "path.id"); err != nil {
		return err
	}
	if next.PIUsername != cur.PIUsername {
		if err := requireAction(c, cur, ActEdit, "body.pi_username"); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name     string
		cur, new any
	}{{"short_name", cur.ShortName, next.ShortName}, {"title", cur.Title, next.Title}, {"pi", cur.PI, next.PI},
		{"description", cur.Description, next.Description}, {"status", cur.Status, next.Status},
		{"allocated_hours", fmtHours(cur.AllocatedHours), fmtHours(next.AllocatedHours)}} {
		if f.cur != f.new {
			if err := requireAction(c, cur, ActEdit, "body."+f.name); err != nil {
				return err
			}
		}
	}
	if next.Members != nil && !sameSet(cur.Members, next.Members) {
		if err := requireAction(c, cur, ActMembers, "body.members"); err != nil {
			return err
		}
	}
	return nil
}

func fmtHours(h *float64) string {
	if h == nil {
		return "null"
	}
	return fmt.Sprint(*h)
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// ownersForCreate sets the PI of a program caller creates: the caller, unless an admin names
// another; an observer naming someone else is refused (403).
func ownersForCreate(c Caller, spec *ProgramSpec) error {
	switch {
	case spec.PIUsername == "":
		spec.PIUsername = c.Name
	case spec.PIUsername != c.Name && !c.Admin:
		return &ForbiddenError{Location: "body.pi_username", Message: fmt.Sprintf(
			"%s may create programs only as their PI (pi_username %q or left out); only an admin names another PI", callerName(c), c.Name)}
	}
	if spec.PIUsername == "" {
		return problem.Field("body.pi_username", "required: the caller has no username", nil)
	}
	return nil
}

// normalizeOwners trims and checks pi_username and members: usernames without control
// characters, members distinct and not the PI.
func (p *ProgramSpec) normalizeOwners() error {
	p.PIUsername = strings.TrimSpace(p.PIUsername)
	if hasControl(p.PIUsername) || len(p.PIUsername) > 255 {
		return problem.Field("body.pi_username", "must be a username (at most 255 characters, no control characters)", nil)
	}
	if len(p.Members) > MaxMembers {
		return problem.Field("body.members", fmt.Sprintf("at most %d members", MaxMembers), len(p.Members))
	}
	seen := map[string]int{}
	for i := range p.Members {
		m := strings.TrimSpace(p.Members[i])
		p.Members[i] = m
		f := fmt.Sprintf("body.members[%d]", i)
		switch {
		case m == "" || len(m) > 255 || hasControl(m):
			return problem.Field(f, "must be a username (1-255 characters, no control characters)", m)
		case m == p.PIUsername:
			return problem.Field(f, "is the program's PI (pi_username), who is not also a member", m)
		}
		if j, dup := seen[m]; dup {
			return problem.Field(f, fmt.Sprintf("repeats members[%d]", j), m)
		}
		seen[m] = i
	}
	return nil
}

// SourceOwners are whom a source's changes concern: who created it and the owners of every
// program whose obs units use it.
type SourceOwners struct {
	CreatedBy string
	Programs  []Program // id, short name and owners of each program using the source
}

// MaySourceChange is the rule for changing or deleting a shared source: an admin; else the caller
// must be allowed to change the obs units of every program using it, and, when no program uses
// it, be the one who created it.
func MaySourceChange(c Caller, sourceID int64, o SourceOwners) error {
	if c.Admin {
		return nil
	}
	for _, p := range o.Programs {
		if !MayChange(c, p.Owners(), ActUnits) {
			return &ForbiddenError{Location: "path.id", Message: fmt.Sprintf(
				"%s may not change source %d: program %d (%s) uses it and only its PI, its members or an admin may change its sources",
				callerName(c), sourceID, p.ID, p.ShortName)}
		}
	}
	if len(o.Programs) == 0 && (c.Name == "" || c.Name != o.CreatedBy) {
		return &ForbiddenError{Location: "path.id", Message: fmt.Sprintf(
			"%s may not change source %d: no program uses it and only its creator or an admin may change it", callerName(c), sourceID)}
	}
	return nil
}
