package authtoken_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
)

func mustCreate(t *testing.T, s *authtoken.TokenService, c authtoken.Caller, spec authtoken.TokenSpec) authtoken.NewToken {
	t.Helper()
	tok, err := s.Create(context.Background(), c, spec)
	if err != nil {
		t.Fatalf("create %+v: %v", spec, err)
	}
	return tok
}

func verify(s *authtoken.TokenService, raw string, scopes ...string) (*authn.Principal, error) {
	return s.VerifyToken(context.Background(), authn.VerifyRequest{Token: raw, Scopes: scopes, ClientIP: "198.51.100.4"})
}

func wantInvalid(t *testing.T, s *authtoken.TokenService, raw, why string) {
	t.Helper()
	if p, err := verify(s, raw); !errors.Is(err, authn.ErrInvalidCredential) {
		t.Fatalf("%s: verification gave %+v, %v; want invalid credential", why, p, err)
	}
}

func TestVerifyScopes(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice", authn.RoleObserver)
	cases := []struct {
		name     string
		granted  []string
		required []string
		missing  []string // nil: verifies
	}{
		{"exact scope", []string{"read:data"}, []string{"read:data"}, nil},
		{"no scope required", nil, nil, nil},
		{"read wildcard covers every read scope", []string{"read:*"}, []string{"read:data", "read:observations", "read:programs"}, nil},
		{"read wildcard does not cover write", []string{"read:*"}, []string{"read:data", "write:data"}, []string{"write:data"}},
		{"write wildcard covers write scopes", []string{"write:*"}, []string{"write:observations", "write:data"}, nil},
		{"no scopes granted", nil, []string{"read:sources"}, []string{"read:sources"}},
		{"only the missing ones are named", []string{"read:data", "write:data"}, []string{"write:data", "write:observations", "read:instruments"}, []string{"write:observations", "read:instruments"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: tc.name, Scopes: tc.granted})
			p, err := verify(s, tok.Secret, tc.required...)
			if tc.missing == nil {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				want := authn.Principal{UserID: alice.UserID, Username: "alice", Roles: []string{authn.RoleObserver},
					Method: authn.MethodAPIToken, TokenID: tok.ID, Scopes: tok.Scopes}
				if p.UserID != want.UserID || p.Username != want.Username || !slices.Equal(p.Roles, want.Roles) ||
					p.Method != want.Method || p.TokenID != want.TokenID || !slices.Equal(p.Scopes, want.Scopes) {
					t.Fatalf("principal %+v, want %+v", *p, want)
				}
				return
			}
			var scopeErr *authn.InsufficientScopeError
			if !errors.As(err, &scopeErr) || !slices.Equal(scopeErr.Missing, tc.missing) {
				t.Fatalf("verify: %v, want missing %v", err, tc.missing)
			}
		})
	}
}

func TestVerifyRefusesInvalidTokens(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")

	t.Run("unknown", func(t *testing.T) {
		other, _ := authn.NewAPIToken()
		wantInvalid(t, s, other.Raw, "a well-formed token never issued")
	})
	t.Run("expired", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "short"})
		if _, err := verify(s, tok.Secret); err != nil {
			t.Fatal(err)
		}
		env.Exec(t, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, tok.ID)
		wantInvalid(t, s, tok.Secret, "expired token")
		got, err := s.Get(context.Background(), alice, tok.ID)
		if err != nil || !got.IsExpired || !got.IsActive {
			t.Fatalf("expired token reads %+v, %v", got, err)
		}
	})
	t.Run("revoked takes effect at once", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "r"})
		if _, err := verify(s, tok.Secret); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Revoke(context.Background(), alice, tok.ID); err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, s, tok.Secret, "revoked token")
	})
	t.Run("user disabled", func(t *testing.T) {
		bob := env.User(t, "bob")
		tok := mustCreate(t, s, bob, authtoken.TokenSpec{Name: "b"})
		env.Exec(t, `UPDATE users SET is_active = false WHERE id = $1`, bob.UserID)
		wantInvalid(t, s, tok.Secret, "token of a disabled user")
	})
	t.Run("regenerated", func(t *testing.T) {
		old := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "g", Scopes: []string{"read:data"}})
		fresh, err := s.Regenerate(context.Background(), alice, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, s, old.Secret, "regenerated (old) token")
		if _, err := verify(s, fresh.Secret, "read:data"); err != nil {
			t.Fatalf("new token: %v", err)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "m"})
		for _, bad := range []string{"", "ops_api_token_", tok.Secret + "x", tok.Secret[:len(tok.Secret)-1], strings.ToUpper(tok.Secret), " " + tok.Secret} {
			wantInvalid(t, s, bad, "malformed "+bad)
		}
	})
}

// A malformed token is refused before any database or Redis lookup: a service with neither
// answers it.
func TestMalformedTokensNeedNoLookup(t *testing.T) {
	var s authtoken.TokenService // no store, no counter: any lookup would panic
	for _, bad := range []string{"", "ops_api_token_short", "ops_api_token_" + strings.Repeat("A", 42) + "B", "Bearer x", strings.Repeat("ops_api_token_", 100)} {
		if _, err := s.VerifyToken(context.Background(), authn.VerifyRequest{Token: bad}); !errors.Is(err, authn.ErrInvalidCredential) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

// Many concurrent verifications of one token, with a flusher running and usage read while
// they run: the usage report never goes backwards nor beyond what succeeded, and ends exact.
func TestUsageIsExactUnderConcurrency(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "hot", Scopes: []string{"read:*"}})
	ctx := context.Background()

	flusher := env.Flusher()
	stop := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := flusher.Flush(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	var succeeded atomic.Int64
	background.Go(func() {
		var last int64
		for {
			select {
			case <-stop:
				return
			default:
			}
			floor := succeeded.Load()
			u, err := s.Usage(ctx, alice, tok.ID)
			ceiling := succeeded.Load() + 32 // uses recorded whose callers have not returned yet
			if err != nil {
				t.Error(err)
				return
			}
			if u.UsageCount < last || u.UsageCount < floor || u.UsageCount > ceiling {
				t.Errorf("usage %d: previous %d, succeeded between %d and %d", u.UsageCount, last, floor, ceiling)
				return
			}
			last = u.UsageCount
		}
	})

	const workers, each = 32, 100
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := verify(s, tok.Secret, "read:data"); err != nil {
					t.Error(err)
					return
				}
				succeeded.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	background.Wait()
	if succeeded.Load() != workers*each {
		t.Fatalf("%d verifications succeeded", succeeded.Load())
	}
	u, err := s.Usage(ctx, alice, tok.ID)
	if err != nil || u.UsageCount != workers*each {
		t.Fatalf("usage right after: %+v, %v; want %d", u, err, workers*each)
	}
	if u.LastUsedIP == nil || *u.LastUsedIP != "198.51.100.4" || u.LastUsedAt == nil {
		t.Fatalf("last use %+v", u)
	}
	if _, err := flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.CommittedUses(t, tok.ID); got != workers*each {
		t.Fatalf("committed %d, want %d", got, workers*each)
	}
	if u, _ := s.Usage(ctx, alice, tok.ID); u.UsageCount != workers*each || u.PendingUses != 0 {
		t.Fatalf("usage after flush %+v", u)
	}
}

// Failed verifications (wrong scope) are not uses.
func TestOnlySuccessfulVerificationsCount(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "x", Scopes: []string{"read:data"}})
	for range 3 {
		_, _ = verify(s, tok.Secret, "write:data")
	}
	_, _ = verify(s, tok.Secret, "read:data")
	if u, err := s.Usage(context.Background(), alice, tok.ID); err != nil || u.UsageCount != 1 {
		t.Fatalf("usage %+v, %v; want 1", u, err)
	}
}

// With Redis down, verification still succeeds and each use is written to the row directly.
func TestUsageFallsBackToPostgresWithoutRedis(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	clock := tokentest.NewClock()
	s.Clock, env.Cache.Clock = clock.Now, clock.Now
	alice := env.User(t, "alice")
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "x"})
	ctx := context.Background()
	// The use counted before the kill must be in the AOF when Redis dies: with everysec, a
	// loaded machine may hold the write back for up to two seconds and the kill loses it.
	if err := env.RDB.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(s, tok.Secret); err != nil { // one use pending in Redis
		t.Fatal(err)
	}
	env.Redis.Kill()
	for range 5 {
		if _, err := verify(s, tok.Secret); err != nil {
			t.Fatalf("verify without Redis: %v", err)
		}
	}
	if got := env.CommittedUses(t, tok.ID); got != 5 {
		t.Fatalf("committed %d uses without Redis, want 5", got)
	}
	if u, err := s.Usage(ctx, alice, tok.ID); err != nil || u.UsageCount != 5 {
		t.Fatalf("usage without Redis %+v, %v: want the committed 5", u, err)
	}
	env.Redis.Start() // AOF brings back the pending use
	// The service's client reconnects first (its pooled connections died with the server), so
	// that a slow dial on a loaded machine does not count as Redis failing again; the usage read
	// sees the use that the AOF brought back once Redis answers the service again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, err := s.Usage(ctx, alice, tok.ID)
		if err == nil && u.PendingUses == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage after Redis restarted %+v, %v: want the pending use restored from the AOF", u, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	clock.Advance(1200 * time.Millisecond) // Redis is skipped for a second after a failure
	if _, err := verify(s, tok.Secret); err != nil {
		t.Fatal(err)
	}
	if u, err := s.Usage(ctx, alice, tok.ID); err != nil || u.UsageCount != 7 || u.PendingUses != 2 {
		t.Fatalf("usage after Redis is back %+v, %v; want 7 with 2 pending", u, err)
	}
	if _, err := env.Flusher().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.CommittedUses(t, tok.ID); got != 7 {
		t.Fatalf("committed %d, want 7", got)
	}
}

func TestCreateValidates(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	cases := []struct {
		spec  authtoken.TokenSpec
		field string
	}{
		{authtoken.TokenSpec{Name: ""}, "name"},
		{authtoken.TokenSpec{Name: strings.Repeat("é", 256)}, "name"},
		{authtoken.TokenSpec{Name: "a\x00b"}, "name"},
		{authtoken.TokenSpec{Name: "ok", Scopes: []string{"read:data", "admin:all"}}, "scopes[1]"},
		{authtoken.TokenSpec{Name: "ok", Scopes: []string{"read:"}}, "scopes[0]"},
		{authtoken.TokenSpec{Name: "ok", ExpiresInDays: 366}, "expires_in_days"},
		{authtoken.TokenSpec{Name: "ok", ExpiresInDays: -1}, "expires_in_days"},
	}
	for _, tc := range cases {
		_, err := s.Create(context.Background(), alice, tc.spec)
		var input *problem.FieldError
		if !errors.As(err, &input) || input.Location != "body."+tc.field {
			t.Errorf("create %+v: %v, want an input error on %s", tc.spec, err, tc.field)
		}
	}
	page, err := s.List(context.Background(), alice, authtoken.TokenListQuery{})
	if err != nil || page.Total != 0 {
		t.Fatalf("invalid requests stored tokens: %+v, %v", page, err)
	}

	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: strings.Repeat("é", 255), Scopes: []string{"read:data", "read:data", "write:*"}})
	if !slices.Equal(tok.Scopes, []string{"read:data", "write:*"}) {
		t.Fatalf("scopes %v, want repeats dropped", tok.Scopes)
	}
	if d := time.Until(*tok.ExpiresAt) - 90*24*time.Hour; d > time.Minute || d < -time.Minute {
		t.Fatalf("default expiry %s, want 90 days from now", tok.ExpiresAt)
	}
	if !authn.WellFormedAPIToken(tok.Secret) || tok.Prefix != authn.DisplayPrefix(tok.Secret) {
		t.Fatalf("token %q, prefix %q", tok.Secret, tok.Prefix)
	}
	var hash string
	if err := env.DB.Get(&hash, `SELECT token_hash FROM api_tokens WHERE id = $1`, tok.ID); err != nil || hash != authn.HashAPIToken(tok.Secret) {
		t.Fatalf("stored hash %q (%v), want the SHA-256 of the token", hash, err)
	}
}

func TestPerUserLimitHoldsUnderConcurrency(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	s.Limits.MaxPerUser = 3
	alice := env.User(t, "alice")
	var ok, limited atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := s.Create(context.Background(), alice, authtoken.TokenSpec{Name: "n"})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, authtoken.ErrTokenLimit):
				limited.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 3 || limited.Load() != 7 {
		t.Fatalf("%d created, %d refused; want 3 and 7", ok.Load(), limited.Load())
	}
	page, _ := s.List(context.Background(), alice, authtoken.TokenListQuery{})
	if _, err := s.Revoke(context.Background(), alice, page.Items[0].ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, alice, authtoken.TokenSpec{Name: "after a revocation"})
}

func TestUpdateRegenerateRevoke(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	alice := env.User(t, "alice")
	ctx := context.Background()
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "first", Scopes: []string{"read:data"}, ExpiresInDays: 30})

	name, scopes, days := "renamed", []string{"write:data"}, 7
	up, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Name: &name, Scopes: &scopes, ExpiresInDays: &days})
	if err != nil || up.Name != name || !slices.Equal(up.Scopes, scopes) || time.Until(*up.ExpiresAt) > 7*24*time.Hour {
		t.Fatalf("update: %+v, %v", up, err)
	}
	none := []string{}
	if up, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Scopes: &none}); err != nil || len(up.Scopes) != 0 || up.Name != name {
		t.Fatalf("clearing scopes: %+v, %v", up, err)
	}
	if _, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{}); err == nil {
		t.Fatal("an empty update was accepted")
	}

	// Regenerate keeps name, scopes and lifetime length (7 days now), from now.
	if _, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Scopes: &scopes}); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Regenerate(ctx, alice, tok.ID)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Name != name || !slices.Equal(fresh.Scopes, scopes) || fresh.Secret == tok.Secret || fresh.ID == tok.ID {
		t.Fatalf("regenerated %+v", fresh)
	}
	oldRow, _ := s.Get(ctx, alice, tok.ID)
	lifetime := oldRow.ExpiresAt.Sub(oldRow.CreatedAt)
	if d := fresh.ExpiresAt.Sub(fresh.CreatedAt) - lifetime; d > time.Second || d < -time.Second {
		t.Fatalf("new lifetime %s, old %s", fresh.ExpiresAt.Sub(fresh.CreatedAt), lifetime)
	}
	if oldRow.IsActive || oldRow.RevokedAt == nil || oldRow.ReplacedBy == nil || *oldRow.ReplacedBy != fresh.ID {
		t.Fatalf("old token after regenerate %+v", oldRow)
	}
	for what, err := range map[string]error{
		"regenerate": func() error { _, err := s.Regenerate(ctx, alice, tok.ID); return err }(),
		"update":     func() error { _, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Name: &name}); return err }(),
	} {
		if !errors.Is(err, authtoken.ErrTokenRevoked) {
			t.Errorf("%s of a revoked token: %v", what, err)
		}
	}

	r1, err := s.Revoke(ctx, alice, fresh.ID)
	if err != nil || r1.IsActive || r1.RevokedAt == nil {
		t.Fatalf("revoke %+v, %v", r1, err)
	}
	r2, err := s.Revoke(ctx, alice, fresh.ID)
	if err != nil || !r2.RevokedAt.Equal(*r1.RevokedAt) {
		t.Fatalf("second revoke %+v, %v: want unchanged", r2, err)
	}
}

// BOLA: a user can neither see nor change another user's tokens, whatever the operation;
// admins can. Ids of others' tokens look exactly like ids that do not exist.
func TestUsersOnlyTouchTheirOwnTokens(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	ctx := context.Background()
	alice, bob := env.User(t, "alice"), env.User(t, "bob")
	admin := env.User(t, "root", authn.RoleAdmin)
	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "alice's", Scopes: []string{"read:data"}})
	bobs := mustCreate(t, s, bob, authtoken.TokenSpec{Name: "bob's"})
	name := "stolen"

	for op, call := range map[string]func(authtoken.Caller) error{
		"get":   func(c authtoken.Caller) error { _, err := s.Get(ctx, c, tok.ID); return err },
		"usage": func(c authtoken.Caller) error { _, err := s.Usage(ctx, c, tok.ID); return err },
		"update": func(c authtoken.Caller) error {
			_, err := s.Update(ctx, c, tok.ID, authtoken.TokenChanges{Name: &name})
			return err
		},
		"regenerate": func(c authtoken.Caller) error { _, err := s.Regenerate(ctx, c, tok.ID); return err },
		"revoke":     func(c authtoken.Caller) error { _, err := s.Revoke(ctx, c, tok.ID); return err },
	} {
		if err := call(bob); !errors.Is(err, problem.ErrNotFound) {
			t.Errorf("bob %s alice's token: %v, want not found", op, err)
		}
	}
	res, err := s.BulkRevoke(ctx, bob, []int64{tok.ID, bobs.ID, 999999})
	want := []authtoken.BulkRevokeResult{{tok.ID, authtoken.BulkNotFound}, {bobs.ID, authtoken.BulkRevoked}, {999999, authtoken.BulkNotFound}}
	if err != nil || !slices.Equal(res, want) {
		t.Fatalf("bob's bulk revoke: %v, %v; want %v", res, err, want)
	}
	if got, _ := s.Get(ctx, alice, tok.ID); !got.IsActive || got.Name != "alice's" {
		t.Fatalf("alice's token was changed by bob: %+v", got)
	}
	if _, err := verify(s, tok.Secret, "read:data"); err != nil {
		t.Fatalf("alice's token stopped working: %v", err)
	}
	for _, q := range []authtoken.TokenListQuery{{UserID: alice.UserID}, {AllUsers: true}} {
		if _, err := s.List(ctx, bob, q); !errors.Is(err, authtoken.ErrForbidden) {
			t.Errorf("bob lists %+v: %v, want forbidden", q, err)
		}
	}
	if page, err := s.List(ctx, bob, authtoken.TokenListQuery{UserID: bob.UserID}); err != nil || page.Total != 1 {
		t.Errorf("bob lists his own by id: %+v, %v", page, err)
	}

	// Admins act on every token.
	if page, err := s.List(ctx, admin, authtoken.TokenListQuery{UserID: alice.UserID}); err != nil || page.Total != 1 || page.Items[0].ID != tok.ID {
		t.Fatalf("admin lists alice's: %+v, %v", page, err)
	}
	if page, err := s.List(ctx, admin, authtoken.TokenListQuery{AllUsers: true}); err != nil || page.Total != 2 {
		t.Fatalf("admin lists all: %+v, %v", page, err)
	}
	if _, err := s.Update(ctx, admin, tok.ID, authtoken.TokenChanges{Name: &name}); err != nil {
		t.Fatalf("admin update: %v", err)
	}
	if res, err := s.BulkRevoke(ctx, admin, []int64{tok.ID, bobs.ID}); err != nil ||
		res[0].Status != authtoken.BulkRevoked || res[1].Status != authtoken.BulkAlreadyRevoked {
		t.Fatalf("admin bulk revoke: %v, %v", res, err)
	}
}

// BFLA: admin-only operations refuse other users in the service itself.
func TestAdminOnlyOperations(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	ctx := context.Background()
	alice := env.User(t, "alice", authn.RoleObserver)
	if _, err := s.CreateServiceToken(ctx, alice, "robot", authtoken.TokenSpec{Scopes: []string{"write:data"}}); !errors.Is(err, authtoken.ErrForbidden) {
		t.Fatalf("non-admin service token: %v", err)
	}
	if _, err := env.Users.ByUsername(ctx, "robot"); !errors.Is(err, problem.ErrNotFound) {
		t.Fatalf("a refused service-token request created the account: %v", err)
	}
	if _, err := s.AuditLog(ctx, alice, authtoken.AuditQuery{}); !errors.Is(err, authtoken.ErrForbidden) {
		t.Fatalf("non-admin audit log: %v", err)
	}
}

func TestServiceTokens(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	ctx := context.Background()
	admin := env.User(t, "root", authn.RoleAdmin)

	st, err := s.CreateServiceToken(ctx, admin, "scuba2-ingest", authtoken.TokenSpec{Scopes: []string{"write:observations", "write:data"}, ExpiresInDays: 365})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Account.Created || st.Name != authtoken.DefaultServiceTokenName || st.UserID != st.Account.UserID {
		t.Fatalf("service token %+v", st)
	}
	p, err := verify(s, st.Secret, "write:data")
	if err != nil || !p.HasRole(authn.RoleService) || p.Username != "scuba2-ingest" {
		t.Fatalf("service token verifies as %+v, %v", p, err)
	}
	again, err := s.CreateServiceToken(ctx, admin, "scuba2-ingest", authtoken.TokenSpec{Name: "second", Scopes: []string{"write:data"}})
	if err != nil || again.Account.Created || again.Account.UserID != st.Account.UserID {
		t.Fatalf("second token of the account: %+v, %v", again, err)
	}

	// A person's account is never turned into a service account.
	person := env.User(t, "carol")
	if _, err := s.CreateServiceToken(ctx, admin, "carol", authtoken.TokenSpec{Scopes: []string{"write:data"}}); !errors.Is(err, authtoken.ErrNotServiceAccount) {
		t.Fatalf("service token for a person: %v", err)
	}
	if u, _ := env.Users.ByID(ctx, person.UserID); slices.Contains(u.Roles, authn.RoleService) {
		t.Fatal("carol was given role service")
	}

	// Invalid input creates nothing, not even the account.
	for _, spec := range []authtoken.TokenSpec{{}, {Scopes: []string{"write:everything"}}, {Scopes: []string{"write:data"}, ExpiresInDays: 400}} {
		_, err := s.CreateServiceToken(ctx, admin, "never-created", spec)
		var input *problem.FieldError
		if !errors.As(err, &input) {
			t.Fatalf("service token %+v: %v, want an input error", spec, err)
		}
	}
	if _, err := s.CreateServiceToken(ctx, admin, "bad name", authtoken.TokenSpec{Scopes: []string{"write:data"}}); err == nil {
		t.Fatal("account name with a space accepted")
	}
	if _, err := env.Users.ByUsername(ctx, "never-created"); !errors.Is(err, problem.ErrNotFound) {
		t.Fatalf("refused request created the account: %v", err)
	}
}

func TestAuditTrail(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	ctx := context.Background()
	alice := env.User(t, "alice")
	admin := env.User(t, "root", authn.RoleAdmin)

	tok := mustCreate(t, s, alice, authtoken.TokenSpec{Name: "a", Scopes: []string{"read:data"}})
	name := "b"
	if _, err := s.Update(ctx, alice, tok.ID, authtoken.TokenChanges{Name: &name}); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Regenerate(ctx, alice, tok.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, admin, fresh.ID); err != nil {
		t.Fatal(err)
	}
	svcTok, err := s.CreateServiceToken(ctx, authtoken.CommandLineCaller(), "robot", authtoken.TokenSpec{Scopes: []string{"read:*"}})
	if err != nil {
		t.Fatal(err)
	}

	page, err := s.AuditLog(ctx, admin, authtoken.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		actor   string
		tokenID int64
		action  string
	}
	var got []row
	for _, e := range page.Items {
		got = append(got, row{e.Actor, *e.TokenID, e.Action})
		if (e.Actor == "admin-cli") != (e.ActorUserID == nil) {
			t.Errorf("entry %+v: actor_user_id must be null exactly for the command line", e)
		}
	}
	want := []row{ // newest first
		{"admin-cli", svcTok.ID, authtoken.AuditCreateService},
		{"root", fresh.ID, authtoken.AuditRevoke},
		{"alice", fresh.ID, authtoken.AuditCreate},
		{"alice", tok.ID, authtoken.AuditRegenerate},
		{"alice", tok.ID, authtoken.AuditUpdate},
		{"alice", tok.ID, authtoken.AuditCreate},
	}
	if !slices.Equal(got, want) || page.Total != int64(len(want)) {
		t.Fatalf("audit log %+v, want %+v", got, want)
	}
	if page.Items[4].Detail["before"].(map[string]any)["name"] != "a" || page.Items[4].Detail["after"].(map[string]any)["name"] != "b" {
		t.Fatalf("update detail %v", page.Items[4].Detail)
	}
	if page.Items[0].Detail["account"] != "robot" || page.Items[0].Detail["account_created"] != true {
		t.Fatalf("service detail %v", page.Items[0].Detail)
	}

	// Never a secret or a hash.
	var all string
	if err := env.DB.Get(&all, `SELECT string_agg(detail::text, ' ') FROM token_audit`); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{tok.Secret, fresh.Secret, svcTok.Secret} {
		if strings.Contains(all, strings.TrimPrefix(raw, authn.APITokenPrefix)[8:]) || strings.Contains(all, authn.HashAPIToken(raw)) {
			t.Fatal("the audit log holds a secret or a hash")
		}
	}

	one, err := s.AuditLog(ctx, admin, authtoken.AuditQuery{TokenID: tok.ID, Limit: 2, Offset: 1})
	if err != nil || one.Total != 3 || len(one.Items) != 2 || one.Items[0].Action != authtoken.AuditUpdate {
		t.Fatalf("filtered page %+v, %v", one, err)
	}
}

func TestListPagesAndExport(t *testing.T) {
	env := tokentest.New(t)
	s := env.Service()
	ctx := context.Background()
	alice := env.User(t, "alice")
	for i := range 7 {
		mustCreate(t, s, alice, authtoken.TokenSpec{Name: strings.Repeat("x", i+1)})
	}
	page, err := s.List(ctx, alice, authtoken.TokenListQuery{Limit: 3, Offset: 5})
	if err != nil || page.Total != 7 || len(page.Items) != 2 || page.Limit != 3 || page.Offset != 5 || page.Items[1].Name != "x" {
		t.Fatalf("page %+v, %v", page, err)
	}
	if page, _ := s.List(ctx, alice, authtoken.TokenListQuery{Limit: 10_000}); page.Limit != authtoken.MaxListLimit {
		t.Fatalf("limit %d, want clamped to %d", page.Limit, authtoken.MaxListLimit)
	}
	all, err := s.Export(ctx, alice)
	if err != nil || len(all) != 7 {
		t.Fatalf("export %d tokens, %v", len(all), err)
	}
}
