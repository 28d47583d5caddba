package authtoken

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// MaxBindings bounds each list of a service account's bindings.
const MaxBindings = 100

// AuditSetBindings is the audit action of an admin changing a service account's kind and bindings.
const AuditSetBindings = "set_bindings"

// Bindings are what a service account is bound to (docs/api.md, "Service accounts"): an
// instrument account to instruments (every module of each) and/or instrument modules, a mover to
// data locations (ids of the transfer service's data locations), a weather account to nothing.
type Bindings struct {
	Instruments []int64 `json:"instruments,omitempty" maxItems:"100" doc:"Instrument ids bound whole (instrument accounts)." example:"[1]"`
	Modules     []int64 `json:"instrument_modules,omitempty" maxItems:"100" doc:"Instrument module ids (instrument accounts)." example:"[11,12]"`
	Locations   []int64 `json:"locations,omitempty" maxItems:"100" doc:"Data location ids (movers): the operations whose source or destination is one of them." example:"[1,2]"`
}

// KindBindings are a service account's kind and bindings.
type KindBindings struct {
	Kind     string   `json:"kind" enum:"instrument,mover,weather" doc:"What the account is: instrument (writes its modules' records in ingest), mover (transfer agent API, its locations' operations), weather (no bindings)."`
	Bindings Bindings `json:"bindings" required:"false" doc:"What it is bound to (none for weather)."`
}

// ServiceAccountBindings is a service account and its kind and bindings, as stored.
type ServiceAccountBindings struct {
	UserID   int64  `json:"user_id"`
	Username string `json:"username"`
	// Kind is "" for an account without a kind: no route that checks ownership accepts it.
	Kind     string   `json:"kind" doc:"instrument, mover, weather; empty for an account created without a kind (refused by every route that checks ownership)."`
	Bindings Bindings `json:"bindings"`
}

// ErrBindingsDiffer means a service account exists with another kind or other bindings than a
// creation request gives: they change only through the admin route (SetBindings), audited.
var ErrBindingsDiffer = errors.New("the service account exists with another kind or other bindings")

// normalise validates kb (the rules of each kind) and returns it with each list sorted, without
// repeats. loc is where kb is in the request ("body").
func (kb KindBindings) normalise(loc string) (KindBindings, error) {
	if !authn.ValidServiceKind(kb.Kind) {
		return kb, problem.Field(loc+".kind", "must be instrument, mover or weather", kb.Kind)
	}
	b := &kb.Bindings
	for _, l := range []struct {
		name string
		ids  *[]int64
	}{{"instruments", &b.Instruments}, {"instrument_modules", &b.Modules}, {"locations", &b.Locations}} {
		if len(*l.ids) > MaxBindings {
			return kb, problem.Field(loc+".bindings."+l.name, "at most "+strconv.Itoa(MaxBindings)+" ids", len(*l.ids))
		}
		for _, id := range *l.ids {
			if id <= 0 || id > 1<<31-1 {
				return kb, problem.Field(loc+".bindings."+l.name, "ids are positive integers", id)
			}
		}
		s := slices.Clone(*l.ids)
		slices.Sort(s)
		*l.ids = slices.Compact(s)
		if len(*l.ids) == 0 {
			*l.ids = nil
		}
	}
	switch kb.Kind {
	case authn.KindInstrument:
		if len(b.Locations) > 0 {
			return kb, problem.Field(loc+".bindings.locations", "an instrument account is bound to instruments or instrument modules, not to data locations", b.Locations)
		}
		if len(b.Instruments)+len(b.Modules) == 0 {
			return kb, problem.Field(loc+".bindings", "an instrument account needs at least one instrument or instrument module", nil)
		}
	case authn.KindMover:
		if len(b.Instruments)+len(b.Modules) > 0 {
			return kb, problem.Field(loc+".bindings", "a mover is bound to data locations only", nil)
		}
		if len(b.Locations) == 0 {
			return kb, problem.Field(loc+".bindings.locations", "a mover needs at least one data location", nil)
		}
	case authn.KindWeather:
		if len(b.Instruments)+len(b.Modules)+len(b.Locations) > 0 {
			return kb, problem.Field(loc+".bindings", "a weather account has no bindings", nil)
		}
	}
	return kb, nil
}

// Same reports whether two normalised kinds and bindings are equal.
func (kb KindBindings) Same(o KindBindings) bool {
	return kb.Kind == o.Kind && slices.Equal(kb.Bindings.Instruments, o.Bindings.Instruments) &&
		slices.Equal(kb.Bindings.Modules, o.Bindings.Modules) && slices.Equal(kb.Bindings.Locations, o.Bindings.Locations)
}

// SetBindings (admins only) gives the service account called username a kind and bindings,
// replacing what it had: the one way they change after creation. The change and the values
// before and after are written to the token audit log (action set_bindings) in the same
// transaction, and the account's cached tokens are dropped before answering, so the next
// request of any of its tokens is checked against the new bindings.
func (s *TokenService) SetBindings(ctx context.Context, caller Caller, username string, kb KindBindings) (ServiceAccountBindings, error) {
	if !caller.Admin {
		return ServiceAccountBindings{}, ErrForbidden
	}
	kb, err := kb.normalise("body")
	if err != nil {
		return ServiceAccountBindings{}, err
	}
	acct, err := s.Accounts.SetBindings(ctx, username, kb, Audit{Actor: caller, Action: AuditSetBindings})
	if err != nil {
		return ServiceAccountBindings{}, err
	}
	s.forgetUser(ctx, acct.UserID)
	return acct, nil
}
