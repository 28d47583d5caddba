package authn

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// Problem types of authentication failures, from the one vocabulary (pkg/problem).
const (
	ProblemUnauthorized      = problem.TypePrefix + string(problem.Unauthenticated)
	ProblemForbidden         = problem.TypePrefix + string(problem.Forbidden)
	ProblemInsufficientScope = problem.TypePrefix + string(problem.InsufficientScope)
	ProblemTooManyAttempts   = problem.TypePrefix + string(problem.TooManyFailedAttempts)
)

// Authenticator applies Rules to requests. One is built per service at start.
//
// Failed credentials are budgeted per client address (see Budget): a request whose credential
// does not verify counts one failure of its address, and once the address has used up its
// budget such requests get 429 with Retry-After instead of 401. The credential of every request
// is still checked, and only through cheap, bounded paths (a JWT's signature locally, an API
// token by one lookup), so a credential that verifies is served whatever other clients at the
// same address did (an observatory's instruments share one address). The Redis state is one
// counter per client address, never one per presented credential.
type Authenticator struct {
	JWT    *JWTVerifier
	Tokens TokenVerifier
	// Redis counts failed authentications per client address; nil disables the budget.
	Redis redis.UniversalClient
	// FailureLimit is how many failed authentications one address may make per FailureWindow
	// before its failures are answered 429.
	FailureLimit  int
	FailureWindow time.Duration
	// VerifyTimeout bounds one API token verification (OPS_TOKEN_VERIFY_TIMEOUT); beyond it the
	// request is answered 503 with Retry-After. 0: DefaultVerifyTimeout.
	VerifyTimeout time.Duration
	Log           *slog.Logger
}

// DefaultVerifyTimeout is OPS_TOKEN_VERIFY_TIMEOUT's default.
const DefaultVerifyTimeout = time.Second

// UnavailableRetryAfter is the Retry-After (seconds) of a 503 answered because token
// verification could not finish (Redis or authtoken unavailable or too slow).
const UnavailableRetryAfter = 1

// verifyContext bounds one token verification by VerifyTimeout.
func (a *Authenticator) verifyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := a.VerifyTimeout
	if d <= 0 {
		d = DefaultVerifyTimeout
	}
	return context.WithTimeout(ctx, d)
}

// Failure is a refused authentication, ready to be written as problem+json.
type Failure struct {
	Problem    *problem.Problem
	Challenge  string // WWW-Authenticate value, if any
	RetryAfter int    // seconds, for 429 and 503
	// Verified is set when the credential itself verified and only the rule refused it (403);
	// Account is then its account's user id when known (0: not known).
	Verified bool
	Account  int64
}

func fail(status int, typ, detail, challenge string) *Failure {
	p := problem.New(status, detail)
	if k := problem.Kind(strings.TrimPrefix(typ, problem.TypePrefix)); k.Status() == status {
		p = k.New(detail) // the kind's own title
	}
	return &Failure{Problem: p, Challenge: challenge}
}

// VerifiedHeader is set on a response to a request whose credential verified (whatever the
// rule then decided), to its account's user id ("verified" when the account is not known). The
// gateway uses it to give that account a rate-limit budget of its own, shared by all its
// credentials (a credential that never verified shares its address's), and removes it from the
// answer.
const VerifiedHeader = contract.CredentialVerifiedHeader

// verifiedValue is VerifiedHeader's value for the outcome (p, f) of Authenticate, "" when the
// credential did not verify.
func verifiedValue(p *Principal, f *Failure) string {
	switch {
	case p != nil:
		return strconv.FormatInt(p.UserID, 10)
	case f != nil && f.Verified && f.Account > 0:
		return strconv.FormatInt(f.Account, 10)
	case f != nil && f.Verified:
		return "verified"
	}
	return ""
}

// Authenticate checks the Authorization header of a request from clientIP against rule.
// It returns the caller (nil on anonymous routes) or the failure to answer with.
func (a *Authenticator) Authenticate(ctx context.Context, authorization, clientIP string, rule Rule) (*Principal, *Failure) {
	if rule.Anonymous {
		return nil, nil
	}
	cred, ok := bearer(authorization)
	if !ok {
		f := fail(http.StatusUnauthorized, ProblemUnauthorized, "a bearer credential (session JWT or API token) is required", `Bearer realm="obsops"`)
		if strings.TrimSpace(authorization) != "" { // something was presented, and it is no credential
			return nil, a.failed(ctx, clientIP, f)
		}
		return nil, f
	}
	if LooksLikeAPIToken(cred) {
		return a.apiToken(ctx, cred, clientIP, rule)
	}
	return a.jwt(ctx, cred, clientIP, rule)
}

func (a *Authenticator) apiToken(ctx context.Context, cred, clientIP string, rule Rule) (*Principal, *Failure) {
	if !rule.Token {
		return nil, fail(http.StatusForbidden, ProblemForbidden, "API tokens are not accepted here: sign in for a session JWT", "")
	}
	if !WellFormedAPIToken(cred) {
		return nil, a.failed(ctx, clientIP, fail(http.StatusUnauthorized, ProblemUnauthorized, "malformed API token", `Bearer realm="obsops", error="invalid_token"`))
	}
	vctx, cancel := a.verifyContext(ctx)
	p, err := a.Tokens.VerifyToken(vctx, VerifyRequest{Token: cred, Scopes: rule.Scopes, ClientIP: clientIP})
	cancel()
	var scopeErr *InsufficientScopeError
	switch {
	case errors.Is(err, ErrInvalidCredential):
		return nil, a.failed(ctx, clientIP, fail(http.StatusUnauthorized, ProblemUnauthorized, "API token unknown, revoked or expired", `Bearer realm="obsops", error="invalid_token"`))
	case errors.As(err, &scopeErr):
		f := fail(http.StatusForbidden, ProblemInsufficientScope,
			"API token lacks scope(s): "+strings.Join(scopeErr.Missing, ", "),
			`Bearer realm="obsops", error="insufficient_scope", scope="`+strings.Join(rule.Scopes, " ")+`"`)
		f.Verified = true
		return nil, f
	case err != nil:
		if a.Log != nil {
			a.Log.Error("token verification unavailable", "error", err)
		}
		f := fail(http.StatusServiceUnavailable, problem.Unavailable.Type(), "token verification is unavailable; retry shortly", "")
		f.RetryAfter = UnavailableRetryAfter
		return nil, f
	}
	if len(rule.TokenRoles) > 0 && !p.HasRole(rule.TokenRoles...) {
		f := fail(http.StatusForbidden, ProblemForbidden, "needs an API token of a user with role "+strings.Join(rule.TokenRoles, " or "), "")
		f.Verified, f.Account = true, p.UserID
		return nil, f
	}
	return p, nil
}

func (a *Authenticator) jwt(ctx context.Context, cred, clientIP string, rule Rule) (*Principal, *Failure) {
	if !rule.JWT {
		return nil, fail(http.StatusForbidden, ProblemForbidden, "session JWTs are not accepted here: use an API token of a service account", "")
	}
	p, err := a.JWT.Verify(ctx, cred)
	if err != nil {
		if a.Log != nil {
			a.Log.Debug("jwt rejected", "client", clientIP, "reason", err.Error())
		}
		return nil, a.failed(ctx, clientIP, fail(http.StatusUnauthorized, ProblemUnauthorized, "session JWT invalid or expired", `Bearer realm="obsops", error="invalid_token"`))
	}
	if len(rule.JWTRoles) > 0 && !p.HasRole(rule.JWTRoles...) {
		f := fail(http.StatusForbidden, ProblemForbidden, "requires role "+strings.Join(rule.JWTRoles, " or "), "")
		f.Verified, f.Account = true, p.UserID
		return nil, f
	}
	return p, nil
}

func bearer(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != "" && len(cred) <= 8192
}

// failed counts a failed authentication of clientIP and returns what to answer: f (a 401)
// within the budget, 429 with Retry-After beyond it.
func (a *Authenticator) failed(ctx context.Context, clientIP string, f *Failure) *Failure {
	retry := a.budget().Fail(ctx, clientIP)
	if retry == 0 {
		return f
	}
	tm := fail(http.StatusTooManyRequests, ProblemTooManyAttempts, "too many failed authentication attempts from this address; retry later (a valid credential is still accepted)", "")
	tm.RetryAfter = retry
	return tm
}

func (a *Authenticator) budget() Budget {
	return Budget{Redis: a.Redis, Limit: a.FailureLimit, Window: a.FailureWindow}
}

// limiterTimeout bounds the failed-attempt bookkeeping, so a Redis outage costs a request at
// most this much instead of go-redis's dial retries.
const limiterTimeout = 150 * time.Millisecond

// FailureKeyPrefix prefixes the Redis key of an address's failure counter; the rest is
// service.AddressKey of the address (so one key per IPv4 address or IPv6 /64, never more).
const FailureKeyPrefix = "ops:authfail:"

// Budget is the failed-credential budget of client addresses: Limit failures per Window, counted
// in Redis in one key per address (service.AddressKey) that expires with its window.
type Budget struct {
	Redis  redis.UniversalClient // nil: no budget
	Limit  int                   // 0: no budget
	Window time.Duration
}

// Fail counts one failed authentication of ip and returns 0 while the address is within its
// budget, else the seconds until the window ends (for Retry-After). One Redis round trip; an
// address over its budget adds no key (its counter exists). Redis trouble fails open (0): the
// budget protects against guessing, it must not lock everyone out.
func (b Budget) Fail(ctx context.Context, ip string) int {
	if b.Redis == nil || b.Limit <= 0 || ip == "" {
		return 0
	}
	window := b.Window
	if window <= 0 {
		window = time.Minute
	}
	key := FailureKeyPrefix + service.AddressKey(ip)
	ctx, cancel := context.WithTimeout(ctx, limiterTimeout)
	defer cancel()
	pipe := b.Redis.Pipeline()
	n := pipe.Incr(ctx, key)
	pipe.ExpireNX(ctx, key, window)
	ttl := pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil || n.Val() <= int64(b.Limit) {
		return 0
	}
	return max(1, int((ttl.Val()+time.Second-1)/time.Second))
}

// Protect returns op guarded by rule: the middleware runs before the handler, and the OpenAPI
// document states the security requirement and the 401/403 answers. An anonymous op is returned
// as it is: it needs no credential and its handlers see no principal.
func (a *Authenticator) Protect(op huma.Operation, rule Rule) huma.Operation {
	if rule.Anonymous {
		return op
	}
	op.Middlewares = append(op.Middlewares, func(ctx huma.Context, next func(huma.Context)) {
		ip := service.ClientIP(humafiber.UnwrapV2(ctx))
		p, f := a.Authenticate(ctx.Context(), ctx.Header("Authorization"), ip, rule)
		if v := verifiedValue(p, f); v != "" {
			ctx.SetHeader(VerifiedHeader, v)
		}
		if f != nil {
			writeHuma(ctx, f)
			return
		}
		if p != nil {
			ctx = huma.WithContext(ctx, WithPrincipal(ctx.Context(), p))
		}
		next(ctx)
		// The answer waits until the token's use is counted (the cache counts it while the
		// handler runs; a use it could not count is logged there, the answer stands).
		_ = p.UseCounted(ctx.Context())
	})
	op.Security = []map[string][]string{{"bearer": {}}}
	if op.Responses == nil {
		op.Responses = map[string]*huma.Response{}
	}
	op.Responses["401"] = &huma.Response{Description: "No valid credential (see WWW-Authenticate)."}
	op.Responses["403"] = &huma.Response{Description: "Authenticated but not allowed: " + describe(rule) + "."}
	op.Responses["429"] = &huma.Response{Description: "The credential did not verify and this client address has used up its budget of failed authentications (see Retry-After); a valid credential is still served."}
	op.Description = strings.TrimSpace(op.Description + "\n\nAccess: " + describe(rule) + ".")
	return op
}

// Fiber returns plain Fiber middleware applying rule (for routes outside huma, e.g. WebSockets).
// Browsers cannot set headers on a WebSocket, so there a JWT may come as ?token=.
func (a *Authenticator) Fiber(rule Rule) fiber.Handler {
	return func(c *fiber.Ctx) error {
		authz := c.Get(fiber.HeaderAuthorization)
		if authz == "" && c.Query("token") != "" && strings.EqualFold(c.Get(fiber.HeaderUpgrade), "websocket") {
			authz = "Bearer " + c.Query("token")
		}
		p, f := a.Authenticate(c.UserContext(), authz, service.ClientIP(c), rule)
		if v := verifiedValue(p, f); v != "" {
			c.Set(VerifiedHeader, v)
		}
		if f != nil {
			if f.Challenge != "" {
				c.Set(fiber.HeaderWWWAuthenticate, f.Challenge)
			}
			if f.RetryAfter > 0 {
				c.Set(fiber.HeaderRetryAfter, strconv.Itoa(f.RetryAfter))
			}
			return problem.Write(c, f.Problem)
		}
		if p != nil {
			c.SetUserContext(WithPrincipal(c.UserContext(), p))
		}
		err := c.Next()
		_ = p.UseCounted(c.UserContext()) // as in Protect
		return err
	}
}

func writeHuma(ctx huma.Context, f *Failure) {
	if f.Challenge != "" {
		ctx.SetHeader("WWW-Authenticate", f.Challenge)
	}
	if f.RetryAfter > 0 {
		ctx.SetHeader("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	f.Problem.Instance = ctx.URL().Path
	ctx.SetHeader("Content-Type", problem.ContentType)
	ctx.SetStatus(f.Problem.Status)
	_ = json.NewEncoder(ctx.BodyWriter()).Encode(f.Problem)
}

func describe(r Rule) string {
	var parts []string
	if r.JWT {
		if len(r.JWTRoles) > 0 {
			parts = append(parts, "session JWT with role "+strings.Join(r.JWTRoles, " or "))
		} else {
			parts = append(parts, "session JWT of any user")
		}
	}
	if r.Token {
		s := "API token"
		if len(r.TokenRoles) > 0 {
			s += " of a " + strings.Join(r.TokenRoles, "/") + " account"
		}
		if len(r.Scopes) > 0 {
			s += " with scope " + strings.Join(r.Scopes, ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", or ")
}

// Op returns op guarded by its entry in the access table (RuleFor op.Method, op.Path).
func (a *Authenticator) Op(op huma.Operation) huma.Operation {
	return a.Protect(op, RuleFor(op.Method, op.Path))
}
