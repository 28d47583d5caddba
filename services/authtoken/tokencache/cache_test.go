package tokencache_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
	"github.com/obsops/obsops/services/authtoken/tokencache"
)

// setup returns an environment and one token of a user, with its hash and PostgreSQL record.
func setup(t *testing.T) (*tokentest.Env, authtoken.Caller, authtoken.NewToken, string, authtoken.VerifiedToken) {
	t.Helper()
	env := tokentest.New(t)
	alice := env.User(t, "alice", authn.RoleObserver)
	tok, err := env.Service().Create(context.Background(), alice, authtoken.TokenSpec{Name: "t", Scopes: []string{"read:data"}})
	if err != nil {
		t.Fatal(err)
	}
	hash := authn.HashAPIToken(tok.Secret)
	rec, err := env.Store.Verify(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	return env, alice, tok, hash, rec
}

func cached(t *testing.T, c *tokencache.Cache, hash string) (authtoken.VerifiedToken, bool) {
	t.Helper()
	rec, found, err := c.Get(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	return rec, found
}

func TestFillAndGet(t *testing.T) {
	env, _, _, hash, rec := setup(t)
	ctx := context.Background()
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("a record before any fill")
	}
	if err := env.Cache.Fill(ctx, hash, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	got, found := cached(t, env.Cache, hash)
	if !found || got.TokenID != rec.TokenID || got.UserID != rec.UserID || got.Username != "alice" ||
		!slices.Equal(got.Roles, rec.Roles) || !slices.Equal(got.Scopes, rec.Scopes) || !got.ExpiresAt.Equal(*rec.ExpiresAt) {
		t.Fatalf("cached %+v (found %v), want %+v", got, found, rec)
	}
	if ttl := env.RDB.PTTL(ctx, "ops:{tokencache}:rec:"+hash).Val(); ttl <= 0 || ttl > tokencache.DefaultTTL {
		t.Fatalf("record lives %s, want at most %s", ttl, tokencache.DefaultTTL)
	}
}

// The race invalidation must close: a verifier reads the row, the token is revoked (commit,
// then invalidation), and only then does the verifier fill the cache with what it read.
func TestTombstoneBlocksStaleFill(t *testing.T) {
	env, alice, tok, hash, readBefore := setup(t)
	ctx := context.Background()
	readAt := time.Now()
	if _, err := env.Service().Revoke(ctx, alice, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.Cache.Fill(ctx, hash, readBefore, readAt); err != nil {
		t.Fatal(err)
	}
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("a record read before the revocation was cached after it")
	}
	if ttl := env.RDB.PTTL(ctx, "ops:{tokencache}:gone:"+strconv.FormatInt(tok.ID, 10)).Val(); ttl <= tokencache.DefaultTTL {
		t.Fatalf("tombstone lives %s, want more than the record TTL %s", ttl, tokencache.DefaultTTL)
	}
}

func TestInvalidateUserDropsAndBlocksEveryToken(t *testing.T) {
	env, alice, _, hash, rec := setup(t)
	ctx := context.Background()
	other, err := env.Service().Create(ctx, alice, authtoken.TokenSpec{Name: "u"})
	if err != nil {
		t.Fatal(err)
	}
	otherHash := authn.HashAPIToken(other.Secret)
	otherRec, err := env.Store.Verify(ctx, otherHash)
	if err != nil {
		t.Fatal(err)
	}
	for h, r := range map[string]authtoken.VerifiedToken{hash: rec, otherHash: otherRec} {
		if err := env.Cache.Fill(ctx, h, r, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Cache.InvalidateUser(ctx, alice.UserID); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{hash, otherHash} {
		if _, found := cached(t, env.Cache, h); found {
			t.Fatal("a record of the invalidated user is still cached")
		}
	}
	if err := env.Cache.Fill(ctx, hash, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("a record of the invalidated user was cached again within the tombstone")
	}
}

func TestFillSkipsOldReadsAndExpiredTokens(t *testing.T) {
	env, _, _, hash, rec := setup(t)
	ctx := context.Background()
	if err := env.Cache.Fill(ctx, hash, rec, time.Now().Add(-tokencache.DefaultTTL)); err != nil {
		t.Fatal(err)
	}
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("a read one TTL old was cached (its tombstone may be gone)")
	}
	soon := time.Now().Add(2 * time.Second)
	rec.ExpiresAt = &soon
	if err := env.Cache.Fill(ctx, hash, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ttl := env.RDB.PTTL(ctx, "ops:{tokencache}:rec:"+hash).Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Fatalf("record of a token expiring in 2 s lives %s", ttl)
	}
	past := time.Now().Add(-time.Second)
	rec.ExpiresAt = &past
	env.RDB.FlushDB(ctx)
	if err := env.Cache.Fill(ctx, hash, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("an expired token was cached")
	}
}

func TestPurge(t *testing.T) {
	env, _, _, hash, rec := setup(t)
	ctx := context.Background()
	if err := env.Cache.Fill(ctx, hash, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := env.Cache.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, found := cached(t, env.Cache, hash); found {
		t.Fatal("a record survived Purge")
	}
}
