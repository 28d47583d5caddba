// Package tokentest sets up the real parts token tests run against: a fresh migrated
// PostgreSQL database, a private Redis server, and the token and user services built on them by
// the server's own constructor (app.NewCore), so tests and cmd/authtoken run the same wiring.
package tokentest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/app"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/tokencache"
	"github.com/obsops/obsops/services/authtoken/usage"
)

// Env is one test's database, Redis and token stores.
type Env struct {
	DatabaseURL string
	DB          *sqlx.DB
	Redis       *testenv.RedisServer
	RDB         *redis.Client
	Store       *postgres.Tokens
	Users       *postgres.Users
	Counter     *usage.Counter
	Cache       *tokencache.Cache

	core *app.Core
}

// New starts a database and a Redis for t.
func New(t testing.TB) *Env {
	t.Helper()
	e := &Env{DatabaseURL: testenv.Database(t), Redis: testenv.Redis(t)}
	db, err := database.Open(e.DatabaseURL, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.DB = db
	e.RDB = e.Redis.Client()
	e.core = app.NewCore(&authtoken.Config{TokenDefaultDays: Limits().DefaultDays, MaxTokensPerUser: Limits().MaxPerUser},
		app.Parts{Read: db, Redis: e.RDB})
	e.Store, e.Users, e.Counter, e.Cache = e.core.TokenStore, e.core.UserStore, e.core.Counter, e.core.Cache
	return e
}

// Limits are the token limits tests use unless they say otherwise: the shipped defaults.
func Limits() authtoken.TokenLimits { return authtoken.TokenLimits{DefaultDays: 90, MaxPerUser: 100} }

// Service is the token service as the server builds it: usage counted in Redis, token records
// cached there.
func (e *Env) Service() *authtoken.TokenService { return e.core.NewTokenService() }

// UserService is the user service as the server builds it: user changes invalidate the
// token cache and publish the user directory to e's Redis.
func (e *Env) UserService() *authtoken.UserService { return e.core.NewUserService() }

// Flusher is a usage flusher over e's Redis and database (call Flush to run one round).
func (e *Env) Flusher() *usage.Flusher { return e.core.NewFlusher() }

// User creates a user with roles and returns them as a token-operation caller.
func (e *Env) User(t testing.TB, name string, roles ...string) authtoken.Caller {
	t.Helper()
	ctx := context.Background()
	u, _, err := e.Users.Ensure(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(roles) > 0 {
		if err := e.Users.GrantRoles(ctx, u.ID, roles, "test"); err != nil {
			t.Fatal(err)
		}
	}
	p := &authn.Principal{UserID: u.ID, Username: u.Username, Roles: roles}
	return authtoken.CallerOf(p)
}

// CommittedUses reads a token's usage_count column: what PostgreSQL holds, nothing pending.
func (e *Env) CommittedUses(t testing.TB, tokenID int64) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Get(&n, `SELECT usage_count FROM api_tokens WHERE id = $1`, tokenID); err != nil {
		t.Fatal(err)
	}
	return n
}

// Exec runs SQL against the test database, to set up states that take time to reach (an
// expired token, a disabled user). Like an operator after such SQL, it then purges the token
// cache, which cannot see changes made outside the service.
func (e *Env) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := e.DB.Exec(query, args...); err != nil {
		t.Fatal(err)
	}
	if err := e.Cache.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Clock is a clock a test moves by hand (authtoken.Clock through its Now method), so that
// waiting for time to pass costs no real time. It starts at the real time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to the real time now.
func NewClock() *Clock { return &Clock{now: time.Now()} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
