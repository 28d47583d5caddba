package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// RateLimitWindow is the length of the sliding window the limit applies to.
const RateLimitWindow = time.Minute

// rateLimitBypass is how long the limiter lets everything through after Redis failed, so an
// unreachable or hung Redis costs one timeout per interval instead of one per request.
const rateLimitBypass = time.Second

// slidingWindow counts requests in fixed one-window buckets and estimates the sliding window as
// previous * (unelapsed fraction) + current (the approach of Cloudflare and nginx). It grants up
// to ARGV[4] requests at once (a lease, see RateLimiter) but never beyond the limit, and refuses
// without counting, so a client that waits Retry-After is admitted. Both keys share a hash tag,
// so it also works on Redis Cluster. Replies {granted, current, previous}.
const slidingWindow = `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
local limit = tonumber(ARGV[1])
local elapsed = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local room = math.floor(limit - prev * (window - elapsed) / window - cur)
if room < 1 then
  return {0, cur, prev}
end
local grant = math.min(room, want)
cur = redis.call('INCRBY', KEYS[1], grant)
if cur == grant then
  redis.call('PEXPIRE', KEYS[1], 2 * window)
end
return {grant, cur, prev}
`

// KnownCredentialsCapacity is about how many verified credentials a gateway replica remembers
// (their fingerprints and budget keys, some 150 bytes each); one it forgot shares its address's
// budget until an upstream verifies it again.
const KnownCredentialsCapacity = 50000

// leaseShards spreads the local leases over independently locked maps.
const leaseShards = 32

// RateLimiter limits requests per verified credential, or per client address for anonymous
// requests and credentials no upstream has verified (see Key), with sliding-window counters in
// Redis shared by every gateway replica.
//
// To keep Redis off the hot path a replica takes a small lease when it asks: up to 1% of the
// limit (at most 100, at least 1) counted in Redis at once, then spent locally within the same
// window. Counting happens up front, so the limit is never exceeded; an unspent lease only makes
// the limit up to 1% stricter for that key and window. Limits under 200 per minute are exact.
//
// It fails open: when Redis is down or slow the request passes (logged, and counted in
// obsops_gateway_rate_limit_errors_total), since refusing all traffic would take the whole
// suite down with Redis.
type RateLimiter struct {
	rdb      redis.Scripter
	script   *redis.Script
	limit    int64
	limitStr string
	batch    int64
	timeout  time.Duration
	log      *slog.Logger
	metrics  *Metrics
	now      func() time.Time
	bypassAt atomic.Int64 // unix nanos until which Redis is not asked
	loggedAt atomic.Int64
	shards   [leaseShards]leaseShard
	known    *KnownCredentials
}

type leaseShard struct {
	mu      sync.Mutex
	leases  map[string]*lease
	sweptAt int64 // window index of the last sweep
}

// lease is what one key may still spend locally in one window.
type lease struct {
	window    int64
	tokens    int64
	remaining int64 // for X-RateLimit-Remaining
}

// NewRateLimiter limits to perMinute requests per key in any sliding minute, asking Redis with
// the given timeout per decision.
// known is where it learns which credentials verified and whose they are: limiters of several
// route classes share one (nil: a memory of its own).
func NewRateLimiter(rdb redis.Scripter, perMinute int, timeout time.Duration, log *slog.Logger, m *Metrics, known *KnownCredentials) *RateLimiter {
	if known == nil {
		known = NewKnownCredentials(KnownCredentialsCapacity)
	}
	l := &RateLimiter{rdb: rdb, script: redis.NewScript(slidingWindow), limit: int64(perMinute), timeout: timeout, log: log, metrics: m, now: time.Now,
		known: known}
	l.batch = min(max(l.limit/100, 1), 100)
	l.limitStr = strconv.FormatInt(l.limit, 10)
	for i := range l.shards {
		l.shards[i].leases = map[string]*lease{}
	}
	return l
}

// Key identifies who is limited: a credential an upstream has verified counts against its budget
// (budget, from KnownCredentials: its account's, so one user's many tokens share one budget;
// never the secret itself); any other request — anonymous, or with a credential no upstream has
// verified, junk included — against its client address's (an IPv6 address by its /64). So
// Redis holds one counter per account and per address, never one per presented value.
func Key(c *fiber.Ctx, budget string) string {
	if budget != "" {
		return budget
	}
	return "ip:" + service.AddressKey(service.ClientIP(c))
}

// budgetOf is the budget key of a credential fp that an upstream verified as account's (the
// value of contract.CredentialVerifiedHeader): "acct:<id>", or the credential's own fingerprint
// when the upstream named no account.
func budgetOf(fp Fingerprint, account string) string {
	if n := len(account); n > 0 && n <= 20 && strings.Trim(account, "0123456789") == "" {
		return "acct:" + account
	}
	return "cred:" + hex.EncodeToString(fp[:])
}

// credential is the fingerprint of c's Authorization header (nil without one) and, if an
// upstream verified it, its budget key.
func (k *KnownCredentials) credential(c *fiber.Ctx) (*Fingerprint, string) {
	auth := c.Request().Header.Peek(fiber.HeaderAuthorization)
	if len(auth) == 0 {
		return nil, ""
	}
	fp := Fingerprint(sha256.Sum256(auth))
	budget, _ := k.Budget(fp)
	return &fp, budget
}

// Decision is the outcome of one rate-limit check.
type Decision struct {
	Allowed    bool          // the request may pass
	Remaining  int64         // when allowed: for X-RateLimit-Remaining
	RetryAfter time.Duration // when refused: how long until one more request is admitted
}

// Allow counts one request for key, or refuses it.
func (l *RateLimiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.allow(ctx, key, l.now())
}

// allow is Allow at the given time (Handler reads the clock once per request).
func (l *RateLimiter) allow(ctx context.Context, key string, now time.Time) (Decision, error) {
	win := RateLimitWindow.Milliseconds()
	ms := now.UnixMilli()
	idx, elapsed := ms/win, ms%win

	sh := &l.shards[shardOf(key)]
	sh.mu.Lock()
	if le := sh.leases[key]; le != nil && le.window == idx && le.tokens > 0 {
		le.tokens--
		le.remaining = max(0, le.remaining-1)
		d := Decision{Allowed: true, Remaining: le.remaining}
		sh.mu.Unlock()
		return d, nil
	}
	sh.mu.Unlock()

	base := "ops:ratelimit:{" + key + "}:"
	keys := []string{base + strconv.FormatInt(idx, 10), base + strconv.FormatInt(idx-1, 10)}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	res, err := l.script.Run(ctx, l.rdb, keys, l.limit, elapsed, win, l.batch).Int64Slice()
	if err != nil || len(res) != 3 {
		return Decision{Allowed: true}, err
	}
	granted, cur, prev := res[0], res[1], res[2]
	if granted < 1 {
		return Decision{RetryAfter: retryAfter(cur, prev, l.limit, time.Duration(elapsed)*time.Millisecond, RateLimitWindow)}, nil
	}
	w, e := float64(win), float64(elapsed)
	est := float64(prev)*(w-e)/w + float64(cur)
	d := Decision{Allowed: true, Remaining: max(0, int64(float64(l.limit)-est)) + granted - 1}
	sh.mu.Lock()
	if idx > sh.sweptAt { // once per window: forget leases of past windows
		for k, le := range sh.leases {
			if le.window < idx {
				delete(sh.leases, k)
			}
		}
		sh.sweptAt = idx
	}
	if granted > 1 {
		le := sh.leases[key]
		if le == nil || le.window != idx {
			le = &lease{window: idx}
			sh.leases[key] = le
		}
		le.tokens += granted - 1
		le.remaining = d.Remaining
	}
	sh.mu.Unlock()
	return d, nil
}

// shardOf hashes key (FNV-1a) to a lease shard.
func shardOf(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % leaseShards
}

// retryAfter is the shortest wait after which the sliding estimate admits one more request:
// still in the current window while the previous window's weight fades, or in the next one.
func retryAfter(cur, prev, limit int64, elapsed, window time.Duration) time.Duration {
	room := float64(limit - 1) // the estimate must drop to this for one more request
	w := float64(window)
	if float64(cur) <= room && prev > 0 {
		// prev*(w-elapsed-d)/w + cur <= room
		d := w - float64(elapsed) - (room-float64(cur))*w/float64(prev)
		return time.Duration(max(d, 0))
	}
	// next window: cur*(w-e)/w <= room
	e := 0.0
	if cur > 0 {
		e = max(w*(1-room/float64(cur)), 0)
	}
	return window - elapsed + time.Duration(e)
}

// Handler is the Fiber middleware: it answers 429 problem+json with Retry-After when the
// caller is over the limit and otherwise passes the request on. Afterwards it learns from the
// answer: a credential the upstream verified (contract.CredentialVerifiedHeader, see Forward) gets its own
// budget from the next request on; one the upstream refused with 401 loses it.
func (l *RateLimiter) Handler(c *fiber.Ctx) error {
	fp, budget := l.known.credential(c)
	return l.handle(c, fp, budget)
}

// handle is Handler for a request whose credential (fp, nil without one) and budget key (""
// unless verified) were worked out already.
func (l *RateLimiter) handle(c *fiber.Ctx, fp *Fingerprint, budget string) error {
	t := l.now()
	now := t.UnixNano()
	if now < l.bypassAt.Load() {
		return l.learn(c, fp, c.Next())
	}
	d, err := l.allow(c.UserContext(), Key(c, budget), t)
	if err != nil {
		l.bypassAt.Store(now + int64(rateLimitBypass))
		l.metrics.rateLimitErrors.Inc()
		if last := l.loggedAt.Load(); now-last > int64(10*time.Second) && l.loggedAt.CompareAndSwap(last, now) {
			l.log.Warn("rate limiter cannot reach Redis; letting requests through", "error", err.Error())
		}
		return l.learn(c, fp, c.Next())
	}
	limit := l.limitStr
	if !d.Allowed {
		l.metrics.rateLimited.Inc()
		c.Set(fiber.HeaderRetryAfter, retryAfterSeconds(d.RetryAfter))
		c.Set("X-RateLimit-Limit", limit)
		c.Set("X-RateLimit-Remaining", "0")
		return problem.New(fiber.StatusTooManyRequests,
			"rate limit of "+limit+" requests per minute exceeded; retry after "+retryAfterSeconds(d.RetryAfter)+" s")
	}
	err = l.learn(c, fp, c.Next())
	// Set after the upstream answered: forwarding replaces the response headers. The names are
	// in fasthttp's canonical form, which spares normalizing them per request.
	h := &c.Response().Header
	h.SetCanonical([]byte("X-Ratelimit-Limit"), []byte(limit))
	h.SetCanonical([]byte("X-Ratelimit-Remaining"), strconv.AppendInt(nil, d.Remaining, 10))
	return err
}

// learn records what the upstream said about the request's credential fp (nil: none) and
// passes err on.
func (l *RateLimiter) learn(c *fiber.Ctx, fp *Fingerprint, err error) error {
	switch {
	case fp == nil:
	case verifiedAccount(c) != "":
		l.known.Add(*fp, budgetOf(*fp, verifiedAccount(c)))
	case c.Response().StatusCode() == fiber.StatusUnauthorized:
		l.known.Forget(*fp)
	}
	return err
}
