package authtoken

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/obsops/obsops/pkg/authn"
)

// TokenService owns API tokens (SPEC §2.1, §3, §4.4, §5.2): their lifecycle, who may see and
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

	redisDown      pause // Redis failed a moment ago: skip the cache and count uses in PostgreSQL meanwhile
	fallbackWarned pause // one Redis-fallback warning per interval, not one per request
}

// TokenLimits are the configurable bounds of API tokens.
type TokenLimits struct {
	DefaultDays int // lifetime when a request names none (OPS_TOKEN_DEFAULT_DAYS)
	MaxPerUser  int // active, unexpired tokens one user may hold (OPS_TOKEN_MAX_PER_USER)
}

// TokenLimits returns the token bounds of the configuration.
func (c *Config) TokenLimits() TokenLimits {
	return TokenLimits{DefaultDays: c.TokenDefaultDays, MaxPerUser: c.MaxTokensPerUser}
}

// Limits of token requests (SPEC §8); HTTP validation states the same numbers in its schema.
const (
	MaxTokenNameLength = 255
	MaxBulkRevoke      = 100
	MaxListLimit       = 500
	DefaultListLimit   = 50
)

// DefaultServiceTokenName names a service token whose request gives no name.
const DefaultServiceTokenName = "service token"

// Token is an API token as its owner and admins see it. Its hash never leaves the service and
// its raw value appears exactly once, in NewToken.
type Token struct {
	ID         int64      `json:"id" doc:"Token id." example:"42"`
	UserID     int64      `json:"user_id" doc:"The owning user." example:"7"`
	Name       string     `json:"name" doc:"Human label, at most 255 characters." example:"nightly ingest"`
	Prefix     string     `json:"prefix" doc:"ops_ and the first 8 characters of the secret: enough to recognise the token, far too little to use it." example:"ops_q3J9xK2a"`
	Scopes     []string   `json:"scopes" doc:"Granted scopes (GET /api/tokens/scopes); read:* and write:* cover every scope of their action." example:"[\"read:data\",\"write:data\"]"`
	CreatedAt  time.Time  `json:"created_at" doc:"Creation time (UTC)."`
	ExpiresAt  *time.Time `json:"expires_at" doc:"Expiry (UTC); the token stops verifying at this instant."`
	LastUsedAt *time.Time `json:"last_used_at" doc:"Last successful verification, committed within OPS_TOKEN_USAGE_FLUSH_INTERVAL (GET /api/tokens/{id}/usage is exact in real time)."`
	LastUsedIP *string    `json:"last_used_ip" doc:"Client address of the last successful verification."`
	UsageCount int64      `json:"usage_count" doc:"Successful verifications, committed within OPS_TOKEN_USAGE_FLUSH_INTERVAL."`
	IsActive   bool       `json:"is_active" doc:"False once revoked (directly, in bulk, or by regeneration). An active token still stops verifying when it expires."`
	IsExpired  bool       `json:"is_expired" doc:"Whether expires_at has passed."`
	RevokedAt  *time.Time `json:"revoked_at" doc:"When the token was revoked."`
	ReplacedBy *int64     `json:"replaced_by" doc:"Id of the token that replaced this one when it was regenerated."`
}

// NewToken is a token just created or regenerated, with its raw value: the only time it is shown.
type NewToken struct {
	Token
	Secret string `json:"token" doc:"The raw token (ops_api_token_...), shown only in this response: store it now. Send it as Authorization: Bearer <token>." example:"ops_api_token_q3J9xK2aVb0-_Rk3wL1nP8sT6yZc4HdE5fGhJkLmNoQ"`
}

// ServiceToken is a new token of a service account, and the account it belongs to.
type ServiceToken struct {
	NewToken
	Account ServiceAccount `json:"account" doc:"The service account owning the token."`
}

// ServiceAccount identifies a service account (a user with role service).
type ServiceAccount struct {
	UserID   int64  `json:"user_id" example:"12"`
	Username string `json:"username" example:"scuba2-ingest"`
	Created  bool   `json:"created" doc:"Whether this request created the account."`
}

// TokenUsage are a token's usage statistics, exact at the moment of the request: uses still
// pending in Redis are included.
type TokenUsage struct {
	TokenID     int64      `json:"token_id" example:"42"`
	UsageCount  int64      `json:"usage_count" doc:"Successful verifications so far, including pending_uses."`
	PendingUses int64      `json:"pending_uses" doc:"Uses counted in Redis and not yet committed to PostgreSQL (included in usage_count)."`
	LastUsedAt  *time.Time `json:"last_used_at" doc:"Last successful verification."`
	LastUsedIP  *string    `json:"last_used_ip" doc:"Client address of the last successful verification."`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	IsActive    bool       `json:"is_active" doc:"False once revoked."`
	IsExpired   bool       `json:"is_expired" doc:"Whether expires_at has passed."`
}

// TokenSpec describes a token to create.
type TokenSpec struct {
	Name          string
	Scopes        []string
	ExpiresInDays int // 0: TokenLimits.DefaultDays
}

// TokenChanges are what an update sets; a nil field stays as it is.
type TokenChanges struct {
	Name          *string
	Scopes        *[]string
	ExpiresInDays *int // new expiry counted from now
}

// TokenListQuery selects a page of tokens. Without UserID or AllUsers a caller lists their own.
type TokenListQuery struct {
	UserID   int64 // admins: this user's tokens
	AllUsers bool  // admins: every user's tokens
	Limit    int
	Offset   int
}

// AuditQuery selects a page of the audit log, optionally of one token.
type AuditQuery struct {
	TokenID int64 // 0: every token
	Limit   int
	Offset  int
}

// Page is one page of a list (DESIGN §8).
type Page[T any] struct {
	Items  []T   `json:"items"`
	Total  int64 `json:"total" doc:"Number of matching items across all pages."`
	Limit  int   `json:"limit"`
	Offset int   `json:"offset"`
}

// Outcomes of revoking one token in a bulk revocation.
const (
	BulkRevoked        = "revoked"
	BulkAlreadyRevoked = "already_revoked"
	BulkNotFound       = "not_found" // no such token, or not the caller's
)

// BulkRevokeResult is the outcome for one id of a bulk revocation.
type BulkRevokeResult struct {
	TokenID int64  `json:"token_id" example:"42"`
	Status  string `json:"status" enum:"revoked,already_revoked,not_found" doc:"revoked now; already_revoked earlier; not_found: no such token, or not yours (nothing was changed)."`
}

// Audit actions (token_audit.action).
const (
	AuditCreate        = "create"
	AuditUpdate        = "update"
	AuditRegenerate    = "regenerate"
	AuditRevoke        = "revoke"
	AuditCreateService = "create_service"
)

// AuditEntry is one row of the token audit log. It never holds a token's secret or hash.
type AuditEntry struct {
	ID          int64          `json:"id"`
	At          time.Time      `json:"at"`
	ActorUserID *int64         `json:"actor_user_id" doc:"The acting user; null for the admin command line."`
	Actor       string         `json:"actor" doc:"Username of the actor, or admin-cli." example:"alice"`
	TokenID     *int64         `json:"token_id" doc:"The token acted on."`
	Action      string         `json:"action" enum:"create,update,regenerate,revoke,create_service"`
	Detail      map[string]any `json:"detail" doc:"What changed: name, scopes, expiry, owner; for updates the values before and after."`
}

// Audit is the record a store writes, in the same transaction, next to the change it describes.
type Audit struct {
	Actor  Caller
	Action string
	Detail map[string]any // extra facts besides the token's own fields
}

// Caller is who performs a token operation: a signed-in user, or the admin command line.
type Caller struct {
	UserID int64 // 0 for the admin command line
	Name   string
	Admin  bool
}

// CallerOf returns the Caller of an authenticated request.
func CallerOf(p *authn.Principal) Caller {
	return Caller{UserID: p.UserID, Name: p.Username, Admin: p.IsAdmin()}
}

// CommandLineCaller is the `authtoken admin` command: an administrator with no user account.
func CommandLineCaller() Caller { return Caller{Name: "admin-cli", Admin: true} }

// Visibility limits an operation to the tokens of one user, or opens it to all (admins). The
// zero value matches no token.
type Visibility struct {
	AllUsers bool
	UserID   int64
}

// visibility is the one place deciding which tokens a caller may see and change.
func (c Caller) visibility() Visibility {
	if c.Admin {
		return Visibility{AllUsers: true}
	}
	return Visibility{UserID: c.UserID}
}

// TokenRecord is a token about to be stored: its hash, never its raw value.
type TokenRecord struct {
	UserID       int64
	Name         string
	Hash         string
	Prefix       string
	Scopes       []string
	LifetimeDays int
}

// VerifiedToken is an active, unexpired token of an active user, found by its hash: what
// verification needs, and what TokenCache keeps.
type VerifiedToken struct {
	TokenID   int64
	UserID    int64
	Username  string
	Roles     []string
	Scopes    []string
	ExpiresAt *time.Time // nil: never expires
}

// TokenStore keeps API tokens and their audit log. Each changing method is one transaction
// that also writes its audit row(s); v limits it to the tokens the caller may touch.
type TokenStore interface {
	// Create stores rec unless its owner is missing or inactive (ErrAccountInactive) or already
	// holds maxActive active, unexpired tokens (ErrTokenLimit).
	Create(ctx context.Context, rec TokenRecord, maxActive int, a Audit) (Token, error)
	Get(ctx context.Context, id int64, v Visibility) (Token, error)
	List(ctx context.Context, v Visibility, limit, offset int) ([]Token, int64, error)
	Update(ctx context.Context, id int64, v Visibility, ch TokenChanges, a Audit) (Token, error)
	// Regenerate revokes token id and stores next (hash, prefix) with its name and scopes and
	// the same lifetime length, or defaultDays when it had no expiry.
	Regenerate(ctx context.Context, id int64, v Visibility, next TokenRecord, defaultDays int, a Audit) (Token, error)
	Revoke(ctx context.Context, id int64, v Visibility, a Audit) (Token, error)
	BulkRevoke(ctx context.Context, ids []int64, v Visibility, a Audit) ([]BulkRevokeResult, error)
	AuditLog(ctx context.Context, q AuditQuery) ([]AuditEntry, int64, error)

	// Verify finds the active, unexpired token of an active user with hash (ErrNotFound).
	Verify(ctx context.Context, hash string) (VerifiedToken, error)
	// RecordUse counts one use directly in the token's row (when Redis cannot).
	RecordUse(ctx context.Context, tokenID int64, at time.Time, ip string) error
	// UsageStats reads a token and, in the same snapshot, which of flushIDs are applied.
	UsageStats(ctx context.Context, id int64, v Visibility, flushIDs []string) (Token, []string, error)
}

// AccountStore finds or creates the accounts that own service tokens.
type AccountStore interface {
	Ensure(ctx context.Context, name string, service bool) (User, bool, error)
	GrantRoles(ctx context.Context, userID int64, roles []string, by string) error
}

// Errors of token operations, besides ErrNotFound (no such token, or not the caller's).
var (
	ErrTokenRevoked       = errors.New("token is revoked")
	ErrTokenLimit         = errors.New("token limit reached")
	ErrForbidden          = errors.New("not allowed")
	ErrAccountInactive    = errors.New("account missing or inactive")
	ErrNotServiceAccount  = errors.New("account exists and is not a service account")
	errCommandLineNoOwner = fmt.Errorf("%w: the command line owns no tokens", ErrForbidden)
)

// InputError is a request field with an unacceptable value (HTTP 422 naming the field).
type InputError struct {
	Field   string // JSON path inside the request body, e.g. scopes[1]; empty: the whole body
	Message string
	Value   any
}

// Error names the field, then what is wrong with it.
func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// GrantableScope is a scope a token can be given, with what it allows.
type GrantableScope struct {
	Name        string `json:"name" example:"read:data"`
	Description string `json:"description" example:"Read data files"`
}

// GrantableScopes lists every scope of SPEC §5.4, then the wildcards over their actions
// (read:*, write:*), which match every scope of that action during verification.
func GrantableScopes() []GrantableScope {
	var out []GrantableScope
	var actions []string
	for _, s := range authn.Scopes() {
		out = append(out, GrantableScope{Name: s.Name, Description: s.Description})
		action, _, _ := strings.Cut(s.Name, ":")
		if !slices.Contains(actions, action) {
			actions = append(actions, action)
		}
	}
	for _, a := range actions {
		out = append(out, GrantableScope{Name: a + ":*", Description: "Every " + a + ": scope, present and future"})
	}
	return out
}

// validName checks a token name: 1–255 characters, valid UTF-8, no control characters (they
// would corrupt logs and CSV exports, and PostgreSQL refuses NUL).
func validName(field, name string) error {
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return &InputError{Field: field, Message: "must be valid UTF-8"}
	case n < 1 || n > MaxTokenNameLength:
		return &InputError{Field: field, Message: fmt.Sprintf("must be 1 to %d characters", MaxTokenNameLength), Value: name}
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return &InputError{Field: field, Message: "must not contain control characters", Value: name}
	}
	return nil
}

// validScopes checks every scope against SPEC §5.4 and drops repeats, keeping the order.
func validScopes(scopes []string) ([]string, error) {
	out := []string{}
	for i, s := range scopes {
		if !authn.ValidScope(s) {
			return nil, &InputError{Field: fmt.Sprintf("scopes[%d]", i), Message: "unknown scope " + fmt.Sprintf("%q", s) + " (see GET /api/tokens/scopes)", Value: s}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

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
		return &InputError{Field: "expires_in_days", Message: fmt.Sprintf("must be 1 to %d", MaxTokenDays), Value: days}
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
// creating the account with role service first if needed. An existing account must be a
// service account: a person's account is never turned into one by accident.
func (s *TokenService) CreateServiceToken(ctx context.Context, caller Caller, account string, spec TokenSpec) (ServiceToken, error) {
	if !caller.Admin {
		return ServiceToken{}, ErrForbidden
	}
	if !ValidUsername(account) {
		return ServiceToken{}, &InputError{Field: "account", Message: "must be 1 to 255 characters without spaces or control characters", Value: account}
	}
	if spec.Name == "" {
		spec.Name = DefaultServiceTokenName
	}
	if len(spec.Scopes) == 0 {
		return ServiceToken{}, &InputError{Field: "scopes", Message: "a service token needs at least one scope"}
	}
	rec, raw, err := s.record(0, spec)
	if err != nil {
		return ServiceToken{}, err
	}
	user, created, err := s.Accounts.Ensure(ctx, account, true)
	if err != nil {
		return ServiceToken{}, err
	}
	switch {
	case !user.IsService:
		return ServiceToken{}, ErrNotServiceAccount
	case !user.IsActive:
		return ServiceToken{}, ErrAccountInactive
	}
	if !slices.Contains(user.Roles, authn.RoleService) {
		if err := s.Accounts.GrantRoles(ctx, user.ID, []string{authn.RoleService}, caller.Name); err != nil {
			return ServiceToken{}, err
		}
		s.forgetUser(ctx, user.ID) // the account's cached tokens lack the new role
	}
	rec.UserID = user.ID
	tok, err := s.Store.Create(ctx, rec, s.Limits.MaxPerUser, Audit{Actor: caller, Action: AuditCreateService,
		Detail: map[string]any{"account": user.Username, "account_created": created}})
	if err != nil {
		return ServiceToken{}, err
	}
	return ServiceToken{
		NewToken: NewToken{Token: tok, Secret: raw},
		Account:  ServiceAccount{UserID: user.ID, Username: user.Username, Created: created},
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

// pageBounds applies the list defaults and limits of DESIGN §8.
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
		return Token{}, &InputError{Message: "give at least one of name, scopes, expires_in_days"}
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
		return nil, &InputError{Field: "token_ids", Message: fmt.Sprintf("give 1 to %d ids", MaxBulkRevoke), Value: len(ids)}
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
