package authtoken

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/authn"
)

// TokenLimits are the configurable bounds of API tokens.
type TokenLimits struct {
	DefaultDays int // lifetime when a request names none (OPS_TOKEN_DEFAULT_DAYS)
	MaxPerUser  int // active, unexpired tokens one user may hold (OPS_TOKEN_MAX_PER_USER)
}

// TokenLimits returns the token bounds of the configuration.
func (c *Config) TokenLimits() TokenLimits {
	return TokenLimits{DefaultDays: c.TokenDefaultDays, MaxPerUser: c.MaxTokensPerUser}
}

// Limits of token requests (docs/api.md, "API tokens"); HTTP validation states the same numbers in its schema.
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
	UserID   int64    `json:"user_id" example:"12"`
	Username string   `json:"username" example:"scuba2-ingest"`
	Created  bool     `json:"created" doc:"Whether this request created the account."`
	Kind     string   `json:"kind" doc:"The account's kind: instrument, mover, weather, or empty (no kind: refused by every route that checks ownership)."`
	Bindings Bindings `json:"bindings" doc:"The account's bindings."`
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
	// Account is, for a service token, the kind and bindings of its account (nil: not stated:
	// an existing account keeps its own, a new one gets no kind).
	Account *KindBindings
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
	// AuditSetBindings (bindings.go): an admin changed a service account's kind and bindings.
)

// AuditEntry is one row of the token audit log. It never holds a token's secret or hash.
type AuditEntry struct {
	ID          int64          `json:"id"`
	At          time.Time      `json:"at"`
	ActorUserID *int64         `json:"actor_user_id" doc:"The acting user; null for the admin command line."`
	Actor       string         `json:"actor" doc:"Username of the actor, or admin-cli." example:"alice"`
	TokenID     *int64         `json:"token_id" doc:"The token acted on."`
	Action      string         `json:"action" enum:"create,update,regenerate,revoke,create_service,set_bindings"`
	Detail      map[string]any `json:"detail" doc:"What changed: name, scopes, expiry, owner; for updates the values before and after."`
}

// Audit is the record a store writes, in the same transaction, next to the change it describes.
type Audit struct {
	Actor  Caller
	Action string
	Detail map[string]any // extra facts besides the token's own fields
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
	// Service is the kind and bindings of the owner when it is a service account (nil
	// otherwise), instrument bindings expanded to their modules: what ingest and transfer
	// check ownership against, carried with the verified token.
	Service *authn.ServiceBinding
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

	// Verify finds the active, unexpired token of an active user with hash (problem.ErrNotFound).
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
	// EnsureService returns the service account called name, creating it first (with kind
	// and bindings kb when not nil, in the same transaction: an unknown id creates nothing),
	// and its kind and bindings as stored. created tells which happened.
	EnsureService(ctx context.Context, name string, kb *KindBindings) (u User, created bool, stored KindBindings, err error)
	// SetBindings replaces the kind and bindings of the service account called username and
	// writes the audit row a (with the values before and after) in the same transaction
	// (problem.ErrNotFound: no such account; ErrNotServiceAccount).
	SetBindings(ctx context.Context, username string, kb KindBindings, a Audit) (ServiceAccountBindings, error)
}

// Errors of token operations, besides problem.ErrNotFound (no such token, or not the caller's).
var (
	ErrTokenRevoked    = errors.New("token is revoked")
	ErrTokenLimit      = errors.New("token limit reached")
	ErrForbidden       = errors.New("not allowed")
	ErrAccountInactive = errors.New("account missing or inactive")
	// ErrFirstLoginAtMain: a secondary site found no account linked to a login's identity in its
	// replica; accounts are created at the main site only (decisions §45).
	ErrFirstLoginAtMain   = errors.New("no account for this identity at this secondary site: log in at the main site first")
	ErrNotServiceAccount  = errors.New("account exists and is not a service account")
	errCommandLineNoOwner = fmt.Errorf("%w: the command line owns no tokens", ErrForbidden)
)

// GrantableScope is a scope a token can be given, with what it allows.
type GrantableScope struct {
	Name        string `json:"name" example:"read:data"`
	Description string `json:"description" example:"Read data files"`
}

// GrantableScopes lists every scope (docs/api.md, "Scopes and roles"), then the wildcards over their actions
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
