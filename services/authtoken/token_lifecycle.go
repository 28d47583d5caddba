package authtoken

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// TokenService owns API tokens (docs/api.md, "API tokens"): their lifecycle, who may see and
// change them, the audit trail of every change, and verification with exact usage counting.
//
// Every method takes the Caller and enforces ownership itself (users act on their own tokens,
// admins on all), so the rules hold whichever way a request arrives.
type TokenService struct {
	Store    TokenStore
	Accounts AccountStore // creates service accounts; only service-token creation needs it
	// Counter counts verifications in Redis, flushed to PostgreSQL in batches (package usage).
	// Nil means every verification updates its token row directly.
	Counter UsageCounter
	// Cache keeps verification records in Redis (package tokencache); every change to a token
	// invalidates it before answering. Nil means every verification queries PostgreSQL.
	Cache   TokenCache
	Limits  TokenLimits
	Log     *slog.Logger
	Metrics *TokenMetrics // nil: not measured
	// Directory, when set, also refuses tokens of users it knows to be disabled or missing
	// and drops roles taken away (a second line behind the cache invalidation of every user
	// change; see authn.Directory).
	Directory *authn.Directory
	// Clock is the time source (nil: the real clock); tests inject one to move time instead
	// of sleeping.
	Clock Clock

	redisDown      pause // Redis failed a moment ago: skip the cache and count uses in PostgreSQL meanwhile
	fallbackWarned pause // one Redis-fallback warning per interval, not one per request
}

// now is the current time by the service's clock.
func (s *TokenService) now() time.Time { return s.Clock.Now() }

// lifetimeDays resolves expires_in_days: 0 means the default, otherwise 1 to MaxTokenDays.
func (s *TokenService) lifetimeDays(days int) (int, error) {
	if days == 0 {
		return s.Limits.DefaultDays, nil
	}
	if err := checkDays(days); err != nil {
		return 0, err
	}
	return days, nil
}

// checkDays checks an expires_in_days given explicitly: 1 to MaxTokenDays.
func checkDays(days int) error {
	if days < 1 || days > MaxTokenDays {
		return problem.Field("body.expires_in_days", fmt.Sprintf("must be 1 to %d", MaxTokenDays), days)
	}
	return nil
}

// record validates spec and turns it into a new token for userID, returning the raw value too.
func (s *TokenService) record(userID int64, spec TokenSpec) (TokenRecord, string, error) {
	if err := validName("name", spec.Name); err != nil {
		return TokenRecord{}, "", err
	}
	scopes, err := validScopes(spec.Scopes)
	if err != nil {
		return TokenRecord{}, "", err
	}
	days, err := s.lifetimeDays(spec.ExpiresInDays)
	if err != nil {
		return TokenRecord{}, "", err
	}
	raw, err := authn.NewAPIToken()
	if err != nil {
		return TokenRecord{}, "", err
	}
	return TokenRecord{UserID: userID, Name: spec.Name, Hash: raw.Hash, Prefix: raw.Display, Scopes: scopes, LifetimeDays: days}, raw.Raw, nil
}

// Create makes a token for the caller and returns it with its raw value, shown this once.
func (s *TokenService) Create(ctx context.Context, caller Caller, spec TokenSpec) (NewToken, error) {
	if caller.UserID <= 0 {
		return NewToken{}, errCommandLineNoOwner
	}
	rec, raw, err := s.record(caller.UserID, spec)
	if err != nil {
		return NewToken{}, err
	}
	tok, err := s.Store.Create(ctx, rec, s.Limits.MaxPerUser, Audit{Actor: caller, Action: AuditCreate})
	if err != nil {
		return NewToken{}, err
	}
	return NewToken{Token: tok, Secret: raw}, nil
}

// CreateServiceToken (admins only) makes a token for the service account called account,
// creating the account with role service first if needed, with the kind and bindings of
// spec.Account. An existing account must be a service account (a person's account is never
// turned into one by accident) and, when spec.Account is given, have exactly that kind and
// those bindings (ErrBindingsDiffer otherwise: they change only through SetBindings).
func (s *TokenService) CreateServiceToken(ctx context.Context, caller Caller, account string, spec TokenSpec) (ServiceToken, error) {
	if !caller.Admin {
		return ServiceToken{}, ErrForbidden
	}
	if !ValidUsername(account) {
		return ServiceToken{}, problem.Field("body.account", "must be 1 to 255 characters without spaces or control characters", account)
	}
	if spec.Name == "" {
		spec.Name = DefaultServiceTokenName
	}
	if len(spec.Scopes) == 0 {
		return ServiceToken{}, problem.Field("body.scopes", "a service token needs at least one scope", nil)
	}
	rec, raw, err := s.record(0, spec)
	if err != nil {
		return ServiceToken{}, err
	}
	var kb *KindBindings
	if spec.Account != nil {
		n, err := spec.Account.normalise("body")
		if err != nil {
			return ServiceToken{}, err
		}
		kb = &n
	}
	user, created, stored, err := s.Accounts.EnsureService(ctx, account, kb)
	if err != nil {
		return ServiceToken{}, err
	}
	switch {
	case !user.IsService:
		return ServiceToken{}, ErrNotServiceAccount
	case !user.IsActive:
		return ServiceToken{}, ErrAccountInactive
	case kb != nil && !created && !kb.Same(stored):
		// Bindings change only through SetBindings (audited as such), never as a side effect
		// of adding a token.
		return ServiceToken{}, ErrBindingsDiffer
	}
	if !slices.Contains(user.Roles, authn.RoleService) {
		if err := s.Accounts.GrantRoles(ctx, user.ID, []string{authn.RoleService}, caller.Name); err != nil {
			return ServiceToken{}, err
		}
		s.forgetUser(ctx, user.ID) // the account's cached tokens lack the new role
	}
	rec.UserID = user.ID
	detail := map[string]any{"account": user.Username, "account_created": created, "kind": stored.Kind, "bindings": stored.Bindings}
	tok, err := s.Store.Create(ctx, rec, s.Limits.MaxPerUser, Audit{Actor: caller, Action: AuditCreateService, Detail: detail})
	if err != nil {
		return ServiceToken{}, err
	}
	return ServiceToken{
		NewToken: NewToken{Token: tok, Secret: raw},
		Account:  ServiceAccount{UserID: user.ID, Username: user.Username, Created: created, Kind: stored.Kind, Bindings: stored.Bindings},
	}, nil
}

// List returns a page of tokens: the caller's own, or for admins one user's or everyone's.
func (s *TokenService) List(ctx context.Context, caller Caller, q TokenListQuery) (Page[Token], error) {
	v := Visibility{UserID: caller.UserID}
	switch {
	case q.AllUsers || (q.UserID != 0 && q.UserID != caller.UserID):
		if !caller.Admin {
			return Page[Token]{}, fmt.Errorf("%w: only admins list other users' tokens", ErrForbidden)
		}
		v = Visibility{AllUsers: q.AllUsers, UserID: q.UserID}
	case caller.UserID <= 0:
		return Page[Token]{}, errCommandLineNoOwner
	}
	limit, offset := pageBounds(q.Limit, q.Offset)
	items, total, err := s.Store.List(ctx, v, limit, offset)
	return Page[Token]{Items: items, Total: total, Limit: limit, Offset: offset}, err
}

// pageBounds applies the list defaults and limits of lists (docs/api.md, "Conventions").
func pageBounds(limit, offset int) (int, int) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	return min(limit, MaxListLimit), max(offset, 0)
}

// Get returns one token the caller may see.
func (s *TokenService) Get(ctx context.Context, caller Caller, id int64) (Token, error) {
	return s.Store.Get(ctx, id, caller.visibility())
}

// Update changes a token's name, scopes or expiry (counted from now). Revoked tokens cannot be
// changed (ErrTokenRevoked).
func (s *TokenService) Update(ctx context.Context, caller Caller, id int64, ch TokenChanges) (Token, error) {
	if ch.Name == nil && ch.Scopes == nil && ch.ExpiresInDays == nil {
		return Token{}, problem.Field("body", "give at least one of name, scopes, expires_in_days", nil)
	}
	if ch.Name != nil {
		if err := validName("name", *ch.Name); err != nil {
			return Token{}, err
		}
	}
	if ch.Scopes != nil {
		scopes, err := validScopes(*ch.Scopes)
		if err != nil {
			return Token{}, err
		}
		ch.Scopes = &scopes
	}
	if ch.ExpiresInDays != nil {
		if err := checkDays(*ch.ExpiresInDays); err != nil {
			return Token{}, err
		}
	}
	tok, err := s.Store.Update(ctx, id, caller.visibility(), ch, Audit{Actor: caller, Action: AuditUpdate})
	s.forgetTokens(ctx, err, id)
	return tok, err
}

// Regenerate revokes a token and returns its replacement (same name, scopes and lifetime
// length, counted from now) with the raw value, shown this once.
func (s *TokenService) Regenerate(ctx context.Context, caller Caller, id int64) (NewToken, error) {
	raw, err := authn.NewAPIToken()
	if err != nil {
		return NewToken{}, err
	}
	next := TokenRecord{Hash: raw.Hash, Prefix: raw.Display}
	tok, err := s.Store.Regenerate(ctx, id, caller.visibility(), next, s.Limits.DefaultDays, Audit{Actor: caller, Action: AuditRegenerate})
	s.forgetTokens(ctx, err, id) // the old token; the new one was never cached (no negative cache)
	if err != nil {
		return NewToken{}, err
	}
	return NewToken{Token: tok, Secret: raw.Raw}, nil
}

// Revoke deactivates a token at once; revoking a revoked token changes nothing.
func (s *TokenService) Revoke(ctx context.Context, caller Caller, id int64) (Token, error) {
	tok, err := s.Store.Revoke(ctx, id, caller.visibility(), Audit{Actor: caller, Action: AuditRevoke})
	s.forgetTokens(ctx, err, id)
	return tok, err
}

// BulkRevoke revokes up to MaxBulkRevoke tokens and reports each id; ids the caller may not
// touch are reported not_found and left alone.
func (s *TokenService) BulkRevoke(ctx context.Context, caller Caller, ids []int64) ([]BulkRevokeResult, error) {
	if len(ids) < 1 || len(ids) > MaxBulkRevoke {
		return nil, problem.Field("body.token_ids", fmt.Sprintf("give 1 to %d ids", MaxBulkRevoke), len(ids))
	}
	var unique []int64
	for _, id := range ids {
		if !slices.Contains(unique, id) {
			unique = append(unique, id)
		}
	}
	results, err := s.Store.BulkRevoke(ctx, unique, caller.visibility(), Audit{Actor: caller, Action: AuditRevoke, Detail: map[string]any{"bulk": true}})
	touched := unique // on error, which ones changed is unknown
	if err == nil {
		touched = nil
		for _, r := range results {
			if r.Status != BulkNotFound {
				touched = append(touched, r.TokenID)
			}
		}
	}
	s.forgetTokens(ctx, err, touched...)
	return results, err
}

// Export returns every token of the caller, for backup or audit (no secrets, no hashes).
func (s *TokenService) Export(ctx context.Context, caller Caller) ([]Token, error) {
	if caller.UserID <= 0 {
		return nil, errCommandLineNoOwner
	}
	var all []Token
	for offset := 0; ; offset += MaxListLimit {
		items, total, err := s.Store.List(ctx, Visibility{UserID: caller.UserID}, MaxListLimit, offset)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if len(items) < MaxListLimit || int64(len(all)) >= total {
			return all, nil
		}
	}
}

// AuditLog returns a page of the token audit log (admins only).
func (s *TokenService) AuditLog(ctx context.Context, caller Caller, q AuditQuery) (Page[AuditEntry], error) {
	if !caller.Admin {
		return Page[AuditEntry]{}, ErrForbidden
	}
	q.Limit, q.Offset = pageBounds(q.Limit, q.Offset)
	items, total, err := s.Store.AuditLog(ctx, q)
	return Page[AuditEntry]{Items: items, Total: total, Limit: q.Limit, Offset: q.Offset}, err
}
