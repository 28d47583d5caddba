package httpapi

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// scopeName is a scope in a request body; its schema lists the grantable scopes, so an unknown
// one is refused with a 422 naming its position (body.scopes[1]) and value.
type scopeName string

// Schema implements huma.SchemaProvider from authtoken.GrantableScopes, the one list.
func (scopeName) Schema(huma.Registry) *huma.Schema {
	var names []any
	for _, s := range authtoken.GrantableScopes() {
		names = append(names, s.Name)
	}
	return &huma.Schema{Type: huma.TypeString, Enum: names, Description: "A scope of GET /api/tokens/scopes."}
}

func scopeStrings(in []scopeName) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

// tokenCreateBody is the body of POST /api/tokens/.
type tokenCreateBody struct {
	Name          string      `json:"name" minLength:"1" maxLength:"255" doc:"Label (1-255 characters, no control characters)." example:"nightly ingest"`
	Scopes        []scopeName `json:"scopes,omitempty" maxItems:"16" doc:"Scopes to grant (may be empty); repeats are ignored." example:"[\"read:data\"]"`
	ExpiresInDays int         `json:"expires_in_days,omitempty" minimum:"1" maximum:"365" doc:"Lifetime in days from now (1-365); default OPS_TOKEN_DEFAULT_DAYS (90)." example:"30"`
}

// tokenUpdateBody is the body of PUT /api/tokens/{id}: every field optional, at least one given.
type tokenUpdateBody struct {
	Name          *string     `json:"name,omitempty" minLength:"1" maxLength:"255" doc:"New label."`
	Scopes        []scopeName `json:"scopes,omitempty" maxItems:"16" doc:"New scope set, replacing the old one ([] removes every scope)."`
	ExpiresInDays *int        `json:"expires_in_days,omitempty" minimum:"1" maximum:"365" doc:"New lifetime in days, counted from now (1-365)."`
}

// serviceTokenBody is the body of POST /api/tokens/service.
type serviceTokenBody struct {
	Account       string              `json:"account" minLength:"1" maxLength:"255" doc:"Username of the service account; created with role service if it does not exist. An existing account must be a service account." example:"scuba2-ingest"`
	Name          string              `json:"name,omitempty" maxLength:"255" doc:"Label; default \"service token\"." example:"scuba2 raw files"`
	Scopes        []scopeName         `json:"scopes" minItems:"1" maxItems:"16" doc:"Scopes to grant (at least one)." example:"[\"write:observations\",\"write:data\"]"`
	ExpiresInDays int                 `json:"expires_in_days,omitempty" minimum:"1" maximum:"365" doc:"Lifetime in days from now (1-365); default OPS_TOKEN_DEFAULT_DAYS (90)." example:"365"`
	Kind          string              `json:"kind,omitempty" enum:"instrument,mover,weather" doc:"The account's kind. A new account is created with it and bindings; for an existing account it must be the kind it has (409 otherwise: PUT /api/tokens/service/{username}/bindings changes it). Omitted: an existing account keeps its own, a new one gets no kind (refused by every route that checks ownership)." example:"instrument"`
	Bindings      *authtoken.Bindings `json:"bindings,omitempty" doc:"With kind: what the account is bound to (an instrument: instruments and/or instrument_modules; a mover: locations; weather: none). For an existing account they must be the ones it has (409 otherwise)."`
}

// account is the kind and bindings a service-token request states (nil: none).
func (b serviceTokenBody) account() (*authtoken.KindBindings, error) {
	if b.Kind == "" {
		if b.Bindings != nil {
			return nil, problem.Field("body.kind", "bindings need a kind", nil)
		}
		return nil, nil
	}
	kb := &authtoken.KindBindings{Kind: b.Kind}
	if b.Bindings != nil {
		kb.Bindings = *b.Bindings
	}
	return kb, nil
}

// setBindingsInput is PUT /api/tokens/service/{username}/bindings.
type setBindingsInput struct {
	Username string `path:"username" minLength:"1" maxLength:"255" doc:"The service account."`
	Body     authtoken.KindBindings
}

// bulkRevokeBody is the body of POST /api/tokens/bulk-revoke.
type bulkRevokeBody struct {
	TokenIDs []int64 `json:"token_ids" minItems:"1" maxItems:"100" doc:"Ids of the tokens to revoke (1-100); repeats are reported once." example:"[42,43]"`
}

type tokenIDInput struct {
	ID int64 `path:"id" minimum:"1" doc:"Token id."`
}

type tokenListInput struct {
	Limit  int   `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size."`
	Offset int   `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	UserID int64 `query:"user_id" minimum:"1" doc:"Admins: list this user's tokens instead of their own."`
	All    bool  `query:"all" doc:"Admins: list every user's tokens."`
}

type tokenAuditInput struct {
	Limit   int   `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size."`
	Offset  int   `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	TokenID int64 `query:"token_id" minimum:"1" doc:"Only the entries of this token."`
}

type tokenExportInput struct {
	Format string `query:"format" enum:"json,csv" default:"json" doc:"json (default) or csv."`
}

// TokenScopes is the body of GET /api/tokens/scopes.
type TokenScopes struct {
	Scopes []authtoken.GrantableScope `json:"scopes" doc:"Every scope a token can be given: the seven scopes, then the wildcards read:* and write:*."`
}

// TokenExport is the JSON body of GET /api/tokens/export.
type TokenExport struct {
	ExportedAt time.Time         `json:"exported_at"`
	UserID     int64             `json:"user_id" doc:"Whose tokens these are (the caller)."`
	Username   string            `json:"username"`
	Count      int               `json:"count"`
	Tokens     []authtoken.Token `json:"tokens" doc:"Every token of the caller, revoked and expired ones too. No secrets, no hashes."`
}

// BulkRevokeResults is the body of POST /api/tokens/bulk-revoke.
type BulkRevokeResults struct {
	Results []authtoken.BulkRevokeResult `json:"results" doc:"One result per distinct id, in request order."`
	Revoked int                          `json:"revoked" doc:"How many tokens this request revoked."`
}

type bodyOutput[T any] struct {
	Body T
}

type exportOutput struct {
	ContentType        string `header:"Content-Type"`
	ContentDisposition string `header:"Content-Disposition"`
	Body               []byte
}

func out[T any](v T) *bodyOutput[T] { return &bodyOutput[T]{Body: v} }

// tokenCaller is the authenticated caller of a token route (every one needs a credential).
func tokenCaller(ctx context.Context) (authtoken.Caller, error) {
	p := authn.PrincipalFrom(ctx)
	if p == nil {
		return authtoken.Caller{}, huma.Error401Unauthorized("a session JWT is required")
	}
	return authtoken.CallerOf(p), nil
}

// tokenProblem turns a token service error into its problem response; any other error is a
// fault, answered with a 500 that reveals nothing (the chassis logs its cause).
func (h *Handlers) tokenProblem(ctx context.Context, op string, err error) error {
	var input *problem.FieldError
	switch {
	case errors.As(err, &input):
		return input // a 422 naming the input (pkg/problem)
	case errors.Is(err, problem.ErrNotFound):
		return huma.Error404NotFound("no API token with this id (or it is not yours)")
	case errors.Is(err, authtoken.ErrTokenRevoked):
		return huma.Error409Conflict("the token is revoked; create a new one")
	case errors.Is(err, authtoken.ErrTokenLimit):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, authtoken.ErrBindingsDiffer):
		return huma.Error409Conflict(err.Error() + "; they change only through PUT /api/tokens/service/{username}/bindings")
	case errors.Is(err, authtoken.ErrNotServiceAccount):
		return huma.Error409Conflict("the account exists and is not a service account; choose another name")
	case errors.Is(err, authtoken.ErrAccountInactive):
		return huma.Error403Forbidden("the account is disabled or no longer exists")
	case errors.Is(err, authtoken.ErrForbidden):
		return huma.Error403Forbidden(err.Error())
	}
	if database.MainUnreachable(err) { // a secondary site with its WAN down: a quick 503, not a 500
		return database.ErrMainUnreachable
	}
	return fmt.Errorf("token %s: %w", op, err) // a fault: a 500 whose cause the chassis logs once with the request id
}

func (h *Handlers) listScopes(_ context.Context, _ *struct{}) (*bodyOutput[TokenScopes], error) {
	return out(TokenScopes{Scopes: authtoken.GrantableScopes()}), nil
}

func (h *Handlers) createToken(ctx context.Context, in *struct{ Body tokenCreateBody }) (*bodyOutput[authtoken.NewToken], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := h.Tokens.Create(ctx, caller, authtoken.TokenSpec{
		Name: in.Body.Name, Scopes: scopeStrings(in.Body.Scopes), ExpiresInDays: in.Body.ExpiresInDays,
	})
	if err != nil {
		return nil, h.tokenProblem(ctx, "create", err)
	}
	return out(tok), nil
}

func (h *Handlers) listTokens(ctx context.Context, in *tokenListInput) (*bodyOutput[authtoken.Page[authtoken.Token]], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.Tokens.List(ctx, caller, authtoken.TokenListQuery{UserID: in.UserID, AllUsers: in.All, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.tokenProblem(ctx, "list", err)
	}
	return out(page), nil
}

func (h *Handlers) getToken(ctx context.Context, in *tokenIDInput) (*bodyOutput[authtoken.Token], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := h.Tokens.Get(ctx, caller, in.ID)
	if err != nil {
		return nil, h.tokenProblem(ctx, "get", err)
	}
	return out(tok), nil
}

type tokenUpdateInput struct {
	ID   int64 `path:"id" minimum:"1" doc:"Token id."`
	Body tokenUpdateBody
}

func (h *Handlers) updateToken(ctx context.Context, in *tokenUpdateInput) (*bodyOutput[authtoken.Token], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	ch := authtoken.TokenChanges{Name: in.Body.Name, ExpiresInDays: in.Body.ExpiresInDays}
	if in.Body.Scopes != nil {
		scopes := scopeStrings(in.Body.Scopes)
		ch.Scopes = &scopes
	}
	tok, err := h.Tokens.Update(ctx, caller, in.ID, ch)
	if err != nil {
		return nil, h.tokenProblem(ctx, "update", err)
	}
	return out(tok), nil
}

func (h *Handlers) tokenUsage(ctx context.Context, in *tokenIDInput) (*bodyOutput[authtoken.TokenUsage], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	u, err := h.Tokens.Usage(ctx, caller, in.ID)
	if err != nil {
		return nil, h.tokenProblem(ctx, "usage", err)
	}
	return out(u), nil
}

func (h *Handlers) regenerateToken(ctx context.Context, in *tokenIDInput) (*bodyOutput[authtoken.NewToken], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := h.Tokens.Regenerate(ctx, caller, in.ID)
	if err != nil {
		return nil, h.tokenProblem(ctx, "regenerate", err)
	}
	return out(tok), nil
}

func (h *Handlers) revokeToken(ctx context.Context, in *tokenIDInput) (*bodyOutput[authtoken.Token], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := h.Tokens.Revoke(ctx, caller, in.ID)
	if err != nil {
		return nil, h.tokenProblem(ctx, "revoke", err)
	}
	return out(tok), nil
}

func (h *Handlers) bulkRevokeTokens(ctx context.Context, in *struct{ Body bulkRevokeBody }) (*bodyOutput[BulkRevokeResults], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	results, err := h.Tokens.BulkRevoke(ctx, caller, in.Body.TokenIDs)
	if err != nil {
		return nil, h.tokenProblem(ctx, "bulk-revoke", err)
	}
	body := BulkRevokeResults{Results: results}
	for _, r := range results {
		if r.Status == authtoken.BulkRevoked {
			body.Revoked++
		}
	}
	return out(body), nil
}

func (h *Handlers) createServiceToken(ctx context.Context, in *struct{ Body serviceTokenBody }) (*bodyOutput[authtoken.ServiceToken], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	acct, err := in.Body.account()
	if err != nil {
		return nil, err
	}
	tok, err := h.Tokens.CreateServiceToken(ctx, caller, in.Body.Account, authtoken.TokenSpec{
		Name: in.Body.Name, Scopes: scopeStrings(in.Body.Scopes), ExpiresInDays: in.Body.ExpiresInDays, Account: acct,
	})
	if err != nil {
		return nil, h.tokenProblem(ctx, "create-service", err)
	}
	return out(tok), nil
}

func (h *Handlers) setServiceBindings(ctx context.Context, in *setBindingsInput) (*bodyOutput[authtoken.ServiceAccountBindings], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	acct, err := h.Tokens.SetBindings(ctx, caller, in.Username, in.Body)
	if errors.Is(err, problem.ErrNotFound) {
		return nil, huma.Error404NotFound("no account called " + in.Username)
	}
	if err != nil {
		return nil, h.tokenProblem(ctx, "set-bindings", err)
	}
	return out(acct), nil
}

func (h *Handlers) tokenAuditLog(ctx context.Context, in *tokenAuditInput) (*bodyOutput[authtoken.Page[authtoken.AuditEntry]], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.Tokens.AuditLog(ctx, caller, authtoken.AuditQuery{TokenID: in.TokenID, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.tokenProblem(ctx, "audit", err)
	}
	return out(page), nil
}

func (h *Handlers) exportTokens(ctx context.Context, in *tokenExportInput) (*exportOutput, error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	tokens, err := h.Tokens.Export(ctx, caller)
	if err != nil {
		return nil, h.tokenProblem(ctx, "export", err)
	}
	now := time.Now().UTC()
	name := "api-tokens-" + caller.Name + "-" + now.Format("20060102T150405Z")
	if in.Format == "csv" {
		return &exportOutput{ContentType: "text/csv; charset=utf-8", ContentDisposition: attachment(name + ".csv"), Body: tokensCSV(tokens)}, nil
	}
	if tokens == nil {
		tokens = []authtoken.Token{}
	}
	b, err := json.Marshal(TokenExport{ExportedAt: now, UserID: caller.UserID, Username: caller.Name, Count: len(tokens), Tokens: tokens})
	if err != nil {
		return nil, h.tokenProblem(ctx, "export", err)
	}
	return &exportOutput{ContentType: "application/json", ContentDisposition: attachment(name + ".json"), Body: b}, nil
}

// attachment is a Content-Disposition for a download; the name is reduced to safe characters.
func attachment(name string) string {
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, name)
	return `attachment; filename="` + safe + `"`
}

// tokenCSVColumns are the columns of the CSV export, the fields of authtoken.Token.
func tokenCSVColumns() []string {
	return []string{"id", "user_id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at",
		"last_used_ip", "usage_count", "is_active", "is_expired", "revoked_at", "replaced_by"}
}

// tokensCSV renders tokens as CSV (RFC 4180); scopes are space-separated, absent values empty.
// Cells that a spreadsheet would run as a formula are prefixed with a quote.
func tokensCSV(tokens []authtoken.Token) []byte {
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(tokenCSVColumns())
	for _, t := range tokens {
		replacedBy := ""
		if t.ReplacedBy != nil {
			replacedBy = strconv.FormatInt(*t.ReplacedBy, 10)
		}
		_ = w.Write([]string{
			strconv.FormatInt(t.ID, 10), strconv.FormatInt(t.UserID, 10), spreadsheetSafe(t.Name), t.Prefix,
			strings.Join(t.Scopes, " "), t.CreatedAt.UTC().Format(time.RFC3339), ts(t.ExpiresAt), ts(t.LastUsedAt),
			str(t.LastUsedIP), strconv.FormatInt(t.UsageCount, 10), strconv.FormatBool(t.IsActive),
			strconv.FormatBool(t.IsExpired), ts(t.RevokedAt), replacedBy,
		})
	}
	w.Flush()
	return buf.Bytes()
}

// spreadsheetSafe keeps a user-chosen cell from being read as a formula (CSV injection).
func spreadsheetSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// exportResponses documents both formats of GET /api/tokens/export.
func exportResponses(api huma.API) map[string]*huma.Response {
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[TokenExport](), true, "TokenExport")
	return map[string]*huma.Response{"200": {
		Description: "The caller's tokens, as a download (Content-Disposition: attachment).",
		Content: map[string]*huma.MediaType{
			"application/json": {Schema: schema},
			"text/csv": {Schema: &huma.Schema{Type: huma.TypeString,
				Description: "Header row " + strings.Join(tokenCSVColumns(), ",") + "; scopes space-separated; times RFC 3339 UTC."}},
		},
	}}
}

// verifyOutput is the answer of the internal verification endpoint: the Principal (200) or an
// authn.VerifyFailure (401, 403, 429), the contract of authn.RemoteTokens.
type verifyOutput struct {
	Status     int
	RetryAfter string `header:"Retry-After"`
	Body       any
}

// verifyToken serves the internal verification route; authn.VerifyInternal applies the
// failed-credential budget to callers that are not obsops services.
func (h *Handlers) verifyToken(ctx context.Context, in *struct{ Body authn.VerifyRequest }) (*verifyOutput, error) {
	p, err := h.Auth.VerifyInternal(ctx, in.Body)
	var scopeErr *authn.InsufficientScopeError
	var tooMany *authn.TooManyFailuresError
	switch {
	case err == nil:
		return &verifyOutput{Status: http.StatusOK, Body: p}, nil
	case errors.As(err, &tooMany):
		return &verifyOutput{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(tooMany.RetryAfter),
			Body: authn.VerifyFailure{Error: "too_many_failed_attempts"}}, nil
	case errors.Is(err, authn.ErrInvalidCredential):
		return &verifyOutput{Status: http.StatusUnauthorized, Body: authn.VerifyFailure{Error: "invalid_token"}}, nil
	case errors.As(err, &scopeErr):
		return &verifyOutput{Status: http.StatusForbidden, Body: authn.VerifyFailure{Error: "insufficient_scope", Missing: scopeErr.Missing}}, nil
	}
	if h.Tokens.Log != nil {
		h.Tokens.Log.ErrorContext(ctx, "token verification failed", "error", err)
	}
	return nil, huma.Error503ServiceUnavailable("token verification is unavailable; retry shortly")
}
