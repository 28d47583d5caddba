package authtoken_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/admin"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
)

// verifyCached verifies raw and checks that its record is now in the token cache.
func verifyCached(t *testing.T, env *tokentest.Env, s *authtoken.TokenService, raw string, scopes ...string) {
	t.Helper()
	if _, err := verify(s, raw, scopes...); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if _, found, err := env.Cache.Get(context.Background(), authn.HashAPIToken(raw)); err != nil || !found {
		t.Fatalf("no cached record after a verification (%v)", err)
	}
}

// Every change to a token applies at once, although verifications are served from the cache.
func TestCachedTokenChangesApplyAtOnce(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	ctx := context.Background()

	t.Run("served from the cache", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "c"})
		verifyCached(t, env, s, tok.Secret)
		// Behind the service's back (so nothing is invalidated): the cached record still answers.
		if _, err := env.DB.Exec(`UPDATE api_tokens SET is_active = false WHERE id = $1`, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := verify(s, tok.Secret); err != nil {
			t.Fatalf("verify from the cache: %v", err)
		}
	})
	t.Run("revoke", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "r"})
		verifyCached(t, env, s, tok.Secret)
		if _, err := s.Revoke(ctx, alice, tok.ID); err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, s, tok.Secret, "revoked cached token")
	})
	t.Run("bulk revoke", func(t *testing.T) {
		a := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "b1"})
		b := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "b2"})
		verifyCached(t, env, s, a.Secret)
		verifyCached(t, env, s, b.Secret)
		if _, err := s.BulkRevoke(ctx, alice, []int64{a.ID, b.ID}); err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, s, a.Secret, "bulk-revoked cached token")
		wantInvalid(t, s, b.Secret, "bulk-revoked cached token")
	})
	t.Run("regenerate", func(t *testing.T) {
		old := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "g", Scopes: []string{"read:data"}})
		verifyCached(t, env, s, old.Secret, "read:data")
		fresh, err := s.Regenerate(ctx, alice, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, s, old.Secret, "regenerated (old) cached token")
		verifyCached(t, env, s, fresh.Secret, "read:data")
	})
	t.Run("update scopes", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "s", Scopes: []string{"read:data", "write:data"}})
		verifyCached(t, env, s, tok.Secret, "write:data")
		scopes := []string{"read:data"}
		if _, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Scopes: &scopes}); err != nil {
			t.Fatal(err)
		}
		var scopeErr *authn.InsufficientScopeError
		if _, err := verify(s, tok.Secret, "write:data"); !errors.As(err, &scopeErr) {
			t.Fatalf("removed scope: %v, want insufficient scope", err)
		}
		if _, err := verify(s, tok.Secret, "read:data"); err != nil {
			t.Fatalf("kept scope: %v", err)
		}
	})
	t.Run("role granted to a service account", func(t *testing.T) {
		account, _, err := env.Users.Ensure(ctx, "ingest", true) // a service account without role service yet
		if err != nil {
			t.Fatal(err)
		}
		first := mustCreate(t, s, authtoken.Caller{UserID: account.ID, Name: account.Username}, authtoken.TokenSpec{Name: "i"})
		verifyCached(t, env, s, first.Secret)
		admin := env.User(t, "root", authn.RoleAdmin)
		if _, err := s.CreateServiceToken(ctx, admin, "ingest", authtoken.TokenSpec{Scopes: []string{"write:data"}}); err != nil {
			t.Fatal(err)
		}
		if p, err := verify(s, first.Secret); err != nil || !p.HasRole(authn.RoleService) {
			t.Fatalf("after the grant: %+v, %v; want role service at once", p, err)
		}
	})
}

// Without Redis, tokens verify from PostgreSQL alone, and changes still succeed and apply.
func TestCacheWithoutRedis(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	ctx := context.Background()
	kept := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "k"})
	revoked := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "r"})
	verifyCached(t, env, s, kept.Secret)
	env.Redis.Kill()
	for range 3 {
		if _, err := verify(s, kept.Secret); err != nil {
			t.Fatalf("verify without Redis: %v", err)
		}
	}
	if _, err := s.Revoke(ctx, alice, revoked.ID); err != nil {
		t.Fatalf("revoke without Redis: %v", err)
	}
	wantInvalid(t, s, revoked.Secret, "token revoked while Redis was down")
	other, _ := authn.NewAPIToken()
	wantInvalid(t, s, other.Raw, "unknown token while Redis was down")
}

// `authtoken admin grant-role`, another process, invalidates the user's cached tokens too.
func TestAdminGrantRoleInvalidatesCachedTokens(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice", authn.RoleViewer)
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "a"})
	verifyCached(t, env, s, tok.Secret)
	cfg := &authtoken.Config{Common: config.Common{DatabaseURL: env.DatabaseURL, RedisURL: env.Redis.URL}}
	var out bytes.Buffer
	if err := admin.Run(context.Background(), &admin.Env{Config: cfg, Stdout: &out, Stderr: &out},
		[]string{"grant-role", "--user", "alice", "--roles", authn.RoleObserver}); err != nil {
		t.Fatalf("grant-role: %v (%s)", err, out.String())
	}
	p, err := verify(s, tok.Secret)
	if err != nil || !p.HasRole(authn.RoleObserver) {
		t.Fatalf("after grant-role: %+v, %v; want role observer at once", p, err)
	}
}
