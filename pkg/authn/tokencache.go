package authn

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/groupcommit"
)

// MaxTokenCacheTTL bounds OPS_TOKEN_CACHE_TTL: the longest a change to a token (revoked,
// rescoped, expired) can go unseen by a service whose invalidation message was lost.
const MaxTokenCacheTTL = time.Second

// tokenCacheSize bounds the entries of a CachedTokens (about 200 bytes each); a full cache is
// emptied and refills from the tokens in use.
const tokenCacheSize = 10000

// usageTimeout bounds recording one use of a cached token in Redis.
const usageTimeout = 200 * time.Millisecond

// CachedTokens verifies API tokens through Next (authtoken, RemoteTokens) and remembers each
// successful verification in process for at most TTL, so a token sending thousands of requests
// per second costs about one call to authtoken per TTL instead of one per request (an HTTP hop,
// authtoken's own Redis round trips, its CPU).
//
// What a hit still does, so that verification means what it did:
//
//   - scopes are checked against the route's rule locally (the cached principal carries the
//     token's scopes);
//   - the user directory (Users) is applied as for a session JWT: a disabled user, or a role
//     taken away, takes effect at the same moment as everywhere else;
//   - the use is counted exactly as authtoken counts it (contract.TokenUsageCountKey), while the
//     request runs and committed before its answer is sent (the principal carries the pending
//     use: Principal.UseCounted, which the middleware waits for), so usage_count, last_used_at
//     and last_used_ip stay exact; if Redis cannot take it, authtoken verifies the token again
//     and counts it (with its own fallback). Uses of concurrent requests are written together
//     (a group commit, see usageWrite): one Redis MULTI per batch instead of one per request.
//
// Invalidation: authtoken announces every change to tokens on contract.TokenInvalidationChannel
// after dropping its own cached records, and every new user directory version is announced on
// contract.UserDirectoryChannel; either message empties the cache at once. A generation number
// keeps a verification that was in flight during the message from caching its older answer. A
// lost message (Redis reconnecting) is bounded by TTL, as is a token reaching its expiry.
//
// In the last quarter of an entry's life one request (only one) is verified at authtoken again
// and refreshes the entry, so a busy token never expires for all its requests at once.
type CachedTokens struct {
	Next  TokenVerifier
	Redis redis.UniversalClient // records the uses of cache hits and carries the invalidations
	Users *Directory            // applied on every hit; nil: none
	TTL   time.Duration
	Log   *slog.Logger
	// Now is the cache's clock (nil: time.Now).
	Now func() time.Time

	start   sync.Once
	uses    groupcommit.Group[usageWrite]
	mu      sync.RWMutex
	m       map[[sha256.Size]byte]*cachedToken
	flights map[[sha256.Size]byte]*flight
	gen     uint64 // incremented by every invalidation
}

type cachedToken struct {
	p          Principal
	refreshAt  int64 // unix nanoseconds: from then on one request refreshes the entry
	until      int64 // unix nanoseconds: expiry
	refreshing atomic.Bool
}

func (c *CachedTokens) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// VerifyToken implements TokenVerifier.
func (c *CachedTokens) VerifyToken(ctx context.Context, req VerifyRequest) (*Principal, error) {
	c.start.Do(c.listen)
	key := sha256.Sum256([]byte(req.Token))
	for joined := false; ; joined = true {
		now := c.now()
		c.mu.RLock()
		e, gen := c.m[key], c.gen
		c.mu.RUnlock()
		if e != nil && now.UnixNano() < e.until && !(now.UnixNano() >= e.refreshAt && e.refreshing.CompareAndSwap(false, true)) {
			p, ok, err := c.hit(ctx, e, req, now)
			if ok {
				return p, err
			}
			c.forget(key, e)
		}
		var f *flight
		if !joined {
			// Not cached, expired, or this request refreshes it: requests for the same token that
			// miss meanwhile wait for the one verification in flight. Without this, a busy token
			// arriving cold — or expiring because authtoken answered the refresh late, as it does
			// when the machine is overloaded — sent every request to authtoken, which made the
			// overload worse (seen on the 2-core machine: authtoken's CPU per ingest request
			// went from 3 to ~100 µs while the gateway answered 503s).
			c.mu.Lock()
			f = c.flights[key]
			lead := f == nil
			if lead {
				f = &flight{done: make(chan struct{})}
				if c.flights == nil {
					c.flights = map[[sha256.Size]byte]*flight{}
				}
				c.flights[key] = f
			}
			c.mu.Unlock()
			if !lead {
				select {
				case <-f.done:
					continue // cached by now, unless it did not verify: then verify this one
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		p, err := c.Next.VerifyToken(ctx, req)
		if err == nil {
			c.fill(key, p, gen, now)
		}
		if f != nil {
			c.mu.Lock()
			delete(c.flights, key)
			c.mu.Unlock()
			close(f.done)
		}
		return p, err
	}
}

// flight is a verification at authtoken that other requests for the same token wait for.
type flight struct{ done chan struct{} }

// hit answers req from entry e, in authtoken's order (the user, then the scopes, then the use,
// counted while the request runs: countUse); ok false sends the request to authtoken instead
// (the directory refusing or restricting the user).
func (c *CachedTokens) hit(ctx context.Context, e *cachedToken, req VerifyRequest, now time.Time) (*Principal, bool, error) {
	if c.Users != nil {
		roles, err := c.Users.Check(ctx, e.p.UserID, e.p.Username, nil, e.p.Roles)
		if err != nil || len(roles) != len(e.p.Roles) {
			return nil, false, nil
		}
	}
	if missing := MissingScopes(e.p.Scopes, req.Scopes); len(missing) > 0 {
		return nil, true, &InsufficientScopeError{Missing: missing} // not a use: authtoken counts none either
	}
	p := e.p // a copy: the caller owns what it gets
	p.use = c.countUse(ctx, req, e.p.TokenID, now)
	return &p, true, nil
}

// pendingUse is one cache hit's use being counted: done closes once it is in Redis, or counted
// at authtoken instead, or not at all (err).
type pendingUse struct {
	done chan struct{}
	err  error
}

// usageFallbackTimeout bounds counting a use at authtoken when Redis did not take it (authtoken
// verifies the token again and counts it, in its Redis or straight in the row).
const usageFallbackTimeout = DefaultVerifyTimeout

// countUse counts one use of token id while the request runs: in Redis with the concurrent
// requests' uses (recordUse), else at authtoken (Next, which counts what it verifies), within
// the verification's deadline (ctx's: OPS_TOKEN_VERIFY_TIMEOUT from when it began, as when the
// request waited for it), so a hung Redis delays no answer beyond that bound. The request does
// not wait for it here — Redis' round trip and fsync were a fifth of an agent request's latency
// (make bench) — but before its answer (Principal.UseCounted).
func (c *CachedTokens) countUse(ctx context.Context, req VerifyRequest, id int64, now time.Time) *pendingUse {
	u := &pendingUse{done: make(chan struct{})}
	deadline, bounded := ctx.Deadline()
	ctx = context.WithoutCancel(ctx) // the verification's context ends when VerifyToken returns
	go func() {
		defer close(u.done)
		if bounded {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		if c.recordUse(ctx, id, now, ClientAddr(req.ClientIP)) == nil {
			return
		}
		fctx, cancel := context.WithTimeout(ctx, usageFallbackTimeout)
		defer cancel()
		if _, u.err = c.Next.VerifyToken(fctx, req); u.err != nil && c.Log != nil {
			c.Log.Warn("token cache: a use could be counted neither in Redis nor at authtoken", "token_id", id, "error", u.err)
		}
	}()
	return u
}

// fill caches p unless an invalidation came since gen was read.
func (c *CachedTokens) fill(key [sha256.Size]byte, p *Principal, gen uint64, now time.Time) {
	ttl := min(c.TTL, MaxTokenCacheTTL)
	e := &cachedToken{p: *p, until: now.Add(ttl).UnixNano(), refreshAt: now.Add(ttl * 3 / 4).UnixNano()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if c.m == nil || len(c.m) >= tokenCacheSize {
		c.m = make(map[[sha256.Size]byte]*cachedToken)
	}
	c.m[key] = e
}

// forget drops entry e of key (not a newer one).
func (c *CachedTokens) forget(key [sha256.Size]byte, e *cachedToken) {
	c.mu.Lock()
	if c.m[key] == e {
		delete(c.m, key)
	}
	c.mu.Unlock()
}

// Invalidate empties the cache; verifications in flight will not cache their answers.
func (c *CachedTokens) Invalidate() {
	c.mu.Lock()
	c.gen++
	c.m = nil
	c.mu.Unlock()
}

// listen empties the cache on every token invalidation and every new user directory, for the
// life of the process (a service keeps its authenticator until it exits). go-redis resubscribes
// after a lost connection; messages published meanwhile are lost, which TTL bounds.
func (c *CachedTokens) listen() {
	sub := c.Redis.Subscribe(context.Background(), contract.TokenInvalidationChannel, contract.UserDirectoryChannel)
	// Wait for the subscription, so that a verification that follows cannot miss a message
	// published after it; without Redis, carry on (the TTL still bounds every entry).
	ctx, cancel := context.WithTimeout(context.Background(), directoryTimeout)
	_, err := sub.Receive(ctx)
	cancel()
	if err != nil && c.Log != nil {
		c.Log.Warn("token cache: cannot subscribe to invalidations yet; entries live at most their TTL", "error", err)
	}
	go func() {
		for range sub.Channel() {
			c.Invalidate()
		}
	}()
}

// usageWrite is one MULTI's worth of uses of cache hits: counts and the latest use per token.
// The uses are written as a group commit (groupcommit.Group): the first request to arrive writes
// its use at once; requests arriving while that write is in flight join the next write. Every
// request's answer waits for the write holding its use (countUse, Principal.UseCounted), so
// counts stay exact, while at thousands of requests per second one MULTI carries dozens of uses
// (Redis round trips are most of a cached verification's cost).
type usageWrite struct {
	counts map[int64]int64
	last   map[int64]tokenUse
}

type tokenUse struct {
	at time.Time
	ip string
}

// recordUse adds one use of token id at at from ip and returns once it is in Redis (or failed).
func (c *CachedTokens) recordUse(ctx context.Context, id int64, at time.Time, ip string) error {
	_, err := c.uses.Join(ctx, func(w *usageWrite) {
		if w.counts == nil {
			w.counts, w.last = map[int64]int64{}, map[int64]tokenUse{}
		}
		w.counts[id]++
		if l, ok := w.last[id]; !ok || !at.Before(l.at) {
			w.last[id] = tokenUse{at, ip}
		}
	}, c.writeUses)
	return err
}

// writeUses writes one round of uses in one MULTI.
func (c *CachedTokens) writeUses(w *usageWrite) error {
	ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
	defer cancel()
	_, err := c.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for id, n := range w.counts {
			field := strconv.FormatInt(id, 10)
			p.HIncrBy(ctx, contract.TokenUsageCountKey, field, n)
			p.HSet(ctx, contract.TokenUsageLastKey, field, strconv.FormatInt(w.last[id].at.UnixMicro(), 10)+" "+w.last[id].ip)
		}
		return nil
	})
	return err
}

// RecordTokenUse counts one use of API token tokenID at at from client address ip (anything
// that is not an IP address is not stored), the way authtoken's usage counter does
// (contract.TokenUsageCountKey): one MULTI, committed to PostgreSQL by authtoken's flusher.
func RecordTokenUse(ctx context.Context, rdb redis.UniversalClient, tokenID int64, at time.Time, ip string) error {
	field := strconv.FormatInt(tokenID, 10)
	last := strconv.FormatInt(at.UnixMicro(), 10) + " " + ClientAddr(ip)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, contract.TokenUsageCountKey, field, 1)
		p.HSet(ctx, contract.TokenUsageLastKey, field, last)
		return nil
	})
	return err
}

// ClientAddr normalises a client address for last_used_ip: an IP address in its canonical form
// (an IPv4-mapped IPv6 address as IPv4), anything else "".
func ClientAddr(s string) string {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	return addr.Unmap().String()
}
