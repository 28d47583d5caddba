package testenv

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/redisacl"
)

// ServiceCredentials returns env with the credentials of service (a binary's name): the database
// URLs (OPS_DATABASE_URL, OPS_MAIN_DATABASE_URL) name the service's own role (obsops_<service>,
// migrations/grants) instead of the test cluster's administrator, and OPS_REDIS_URL its Redis
// user (pkg/redisacl, its password RedisPassword), after making sure that Redis has the users. A
// URL naming another user than the administrator is left as the test set it, and so is what a
// binary has no role or user for (the tools).
func ServiceCredentials(t testing.TB, service string, env map[string]string) map[string]string {
	t.Helper()
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	if slices.Contains(migrations.Services(), service) {
		for _, k := range []string{"OPS_DATABASE_URL", "OPS_MAIN_DATABASE_URL"} {
			if v, ok := out[k]; ok && v != "" {
				out[k] = asRole(t, v, migrations.Role(service))
			}
		}
	}
	if v, ok := out["OPS_REDIS_URL"]; ok && v != "" && hasRedisUser(service) {
		out["OPS_REDIS_URL"] = asRedisUser(t, v, service)
	}
	return out
}

// RedisPassword is the password the tests give the Redis user name (pkg/redisacl): fixed, as the
// test servers listen on loopback only and live as long as one test.
func RedisPassword(name string) string { return "obsops-test-" + name + "-password" }

// RedisPasswords are RedisPassword of every user of pkg/redisacl.
func RedisPasswords() map[string]string {
	pw := map[string]string{}
	for _, u := range redisacl.Users() {
		pw[u.Name] = RedisPassword(u.Name)
	}
	return pw
}

func hasRedisUser(name string) bool {
	for _, u := range redisacl.Users() {
		if u.Name == name {
			return true
		}
	}
	return false
}

// asRedisUser is the Redis URL raw with user's name and password, once that Redis has the users
// of pkg/redisacl (applied through its default user: idempotent, so a Redis the test did not
// start through Redis gets them too). A URL with credentials, or a Redis that cannot take the
// users (not running: a test of an unreachable Redis), is left as it is.
func asRedisUser(t testing.TB, raw, user string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.User != nil {
		return raw
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return raw
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.MaxRetries = time.Second, time.Second, time.Second, -1
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := redisacl.Apply(ctx, c, RedisPasswords()); err != nil {
		t.Logf("testenv: %s connects to %s as Redis' default user: %v", user, u.Host, err)
		return raw
	}
	u.User = url.UserPassword(user, RedisPassword(user))
	return u.String()
}

// asRole is dsn with the user migrations.Role names, when dsn names the administrator of
// AdminDatabaseURL (or no user). The test cluster trusts local connections: no password.
func asRole(t testing.TB, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testenv: database URL: %v", err)
	}
	admin, err := url.Parse(AdminDatabaseURL())
	if err != nil {
		t.Fatalf("testenv: OPS_TEST_DATABASE_URL: %v", err)
	}
	if u.User != nil && u.User.Username() != "" && u.User.Username() != admin.User.Username() {
		return dsn
	}
	u.User = url.User(role)
	return u.String()
}
