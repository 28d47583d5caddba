// Package tokencache keeps API token verification records in Redis, so that verifying a token
// costs one Redis GET instead of a PostgreSQL query. It implements authtoken.TokenCache.
//
// Keys (all with the hash tag {tokencache}, so they share a slot in Redis Cluster):
//
//	rec:<hash>        the record of the token with that hash (JSON), for at most TTL
//	id:<token id>     the hash whose record is cached for that token, same lifetime
//	user:<user id>    set of the user's token ids with a cached record
//	gone:<token id>   tombstone: the token changed, do not cache it, for 2×TTL
//	usergone:<id>     tombstone: the user changed, cache none of their tokens, for 2×TTL
//
// Every write that can change how a token verifies calls Invalidate* after its commit: one Lua
// script deletes the cached record(s) and sets the tombstone. A fill is a Lua script that sets
// the record only while no tombstone exists, and only from a PostgreSQL read less than TTL old,
// so a verifier that read the row before a revocation committed can never cache it afterwards:
// its fill comes within TTL of its read, while the tombstone lives 2×TTL from the revocation.
//
// What the cache cannot see: changes made outside the service code (SQL by hand, e.g.
// disabling a user) and invalidations that failed because Redis was unreachable. A record
// then lives at most TTL; Purge (`authtoken admin purge-token-cache`) drops every record at
// once. Unknown hashes are never cached.
package tokencache

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/authtoken"
)

// DefaultTTL is how long a record is cached: the most a change can lag when its invalidation
// could not reach Redis.
const DefaultTTL = 30 * time.Second

// Redis keys.
const (
	keyPrefix      = "ops:{tokencache}:"
	recPrefix      = keyPrefix + "rec:"
	idPrefix       = keyPrefix + "id:"
	userPrefix     = keyPrefix + "user:"
	gonePrefix     = keyPrefix + "gone:"
	userGonePrefix = keyPrefix + "usergone:"
)

func recKey(hash string) string   { return recPrefix + hash }
func idKey(id int64) string       { return idPrefix + strconv.FormatInt(id, 10) }
func userKey(id int64) string     { return userPrefix + strconv.FormatInt(id, 10) }
func goneKey(id int64) string     { return gonePrefix + strconv.FormatInt(id, 10) }
func userGoneKey(id int64) string { return userGonePrefix + strconv.FormatInt(id, 10) }

// fillScript caches a record unless its token or user has a tombstone. KEYS: record, token
// id, user set, token tombstone, user tombstone. ARGV: record, lifetime in ms, hash, token id.
// Returns 1 when cached.
const fillScript = `
if redis.call('EXISTS', KEYS[4], KEYS[5]) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[4])
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 1`

// dropScript invalidates. ARGV: mode, tombstone lifetime in ms, record key prefix, id key
// prefix. Mode "tokens": KEYS are pairs (token tombstone, token id key). Mode "user": KEYS are
// the user tombstone and the user's set of token ids. Each tombstone is set and the records
// the id keys name are deleted.
const dropScript = `
local function drop(idKey)
	local hash = redis.call('GET', idKey)
	if hash then redis.call('DEL', ARGV[3] .. hash, idKey) end
end
if ARGV[1] == 'user' then
	redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
	for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do drop(ARGV[4] .. id) end
	redis.call('DEL', KEYS[2])
	return 1
end
for i = 1, #KEYS, 2 do
	redis.call('SET', KEYS[i], '1', 'PX', ARGV[2])
	drop(KEYS[i + 1])
end
return 1`

// Cache is the Redis cache of verification records. Its zero value is not usable; see New.
type Cache struct {
	// Clock is the time source of fills (nil: the real clock), the same as the token
	// service's, since a fill compares the service's read time with now.
	Clock authtoken.Clock

	rdb  redis.UniversalClient
	ttl  time.Duration
	fill *redis.Script
	drop *redis.Script
}

// New returns a Cache on rdb keeping records for ttl (DefaultTTL when 0).
func New(rdb redis.UniversalClient, ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Cache{rdb: rdb, ttl: ttl, fill: redis.NewScript(fillScript), drop: redis.NewScript(dropScript)}
}

// TTL is how long a record is cached.
func (c *Cache) TTL() time.Duration { return c.ttl }

// record is the stored form of authtoken.VerifiedToken.
type record struct {
	TokenID   int64      `json:"t"`
	UserID    int64      `json:"u"`
	Username  string     `json:"n"`
	Roles     []string   `json:"r"`
	Scopes    []string   `json:"s"`
	ExpiresAt *time.Time `json:"e,omitempty"`
	// Service: the owner's kind and bindings (service accounts only).
	Service *authn.ServiceBinding `json:"v,omitempty"`
}

// Get returns the record cached for hash; found is false when there is none.
func (c *Cache) Get(ctx context.Context, hash string) (tok authtoken.VerifiedToken, found bool, err error) {
	b, err := c.rdb.Get(ctx, recKey(hash)).Bytes()
	if errors.Is(err, redis.Nil) {
		return tok, false, nil
	}
	if err != nil {
		return tok, false, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return tok, false, err
	}
	return authtoken.VerifiedToken{TokenID: r.TokenID, UserID: r.UserID, Username: r.Username,
		Roles: r.Roles, Scopes: r.Scopes, ExpiresAt: r.ExpiresAt, Service: r.Service}, true, nil
}

// Fill caches tok, read from PostgreSQL at readAt, under hash: for TTL or until the token
// expires, whichever is sooner. It caches nothing when the read is TTL old or more, or when
// the token or its user was invalidated in the last 2×TTL (a tombstone exists).
func (c *Cache) Fill(ctx context.Context, hash string, tok authtoken.VerifiedToken, readAt time.Time) error {
	now := c.Clock.Now()
	life := c.ttl - now.Sub(readAt) // a record lives TTL from its read: a change is seen within TTL
	if tok.ExpiresAt != nil {
		life = min(life, tok.ExpiresAt.Sub(now))
	}
	if life < time.Millisecond {
		return nil
	}
	b, err := json.Marshal(record{TokenID: tok.TokenID, UserID: tok.UserID, Username: tok.Username,
		Roles: tok.Roles, Scopes: tok.Scopes, ExpiresAt: tok.ExpiresAt, Service: tok.Service})
	if err != nil {
		return err
	}
	return c.fill.Run(ctx, c.rdb,
		[]string{recKey(hash), idKey(tok.TokenID), userKey(tok.UserID), goneKey(tok.TokenID), userGoneKey(tok.UserID)},
		b, life.Milliseconds(), hash, tok.TokenID).Err()
}

// InvalidateTokens drops the cached records of tokens and blocks caching them for 2×TTL. Call
// it after committing any change to them, before answering.
func (c *Cache) InvalidateTokens(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		keys = append(keys, goneKey(id), idKey(id))
	}
	return c.runDrop(ctx, "tokens", keys)
}

// InvalidateUser drops the cached records of every token of a user and blocks caching any for
// 2×TTL. Call it after committing a change to the user (roles, active flag).
func (c *Cache) InvalidateUser(ctx context.Context, userID int64) error {
	return c.runDrop(ctx, "user", []string{userGoneKey(userID), userKey(userID)})
}

// runDrop runs dropScript in mode on keys, then announces the change to the other services'
// in-process caches (contract.TokenInvalidationChannel).
func (c *Cache) runDrop(ctx context.Context, mode string, keys []string) error {
	if err := c.drop.Run(ctx, c.rdb, keys, mode, (2 * c.ttl).Milliseconds(), recPrefix, idPrefix).Err(); err != nil {
		return err
	}
	return c.rdb.Publish(ctx, contract.TokenInvalidationChannel, mode).Err()
}

// Purge drops every cached record (tombstones stay): for when tokens or users were changed
// in SQL by hand, which the cache cannot see.
func (c *Cache) Purge(ctx context.Context) error {
	iter := c.rdb.Scan(ctx, 0, recPrefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := c.rdb.Del(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		if err := c.rdb.Del(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return c.rdb.Publish(ctx, contract.TokenInvalidationChannel, "purge").Err()
}
