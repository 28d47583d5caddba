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

// ServiceCredentials returns env with the credentials of service (a binary's name), given as a
// deployment gives them: OPS_DATABASE_USER names the service's own role (obsops_<service>,
// migrations/grants) instead of the test cluster's administrator that the URLs name, and
// OPS_REDIS_USERNAME and OPS_REDIS_PASSWORD its Redis user (pkg/redisacl, RedisPassword), once
// that Redis has the users. The URLs stay as the test set them. A URL naming another user than the
// administrator, credentials the test set itself, and what a binary has no role or user for (the
// tools) are left alone.
func ServiceCredentials(t testing.TB, service string, env map[string]string) map[string]string {
	t.Helper()
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	if _, set := out["OPS_DATABASE_USER"]; !set && slices.Contains(migrations.Services(), service) &&
		namesAdmin(t, out["OPS_DATABASE_URL"]) && namesAdmin(t, out["OPS_MAIN_DATABASE_URL"]) && out["OPS_DATABASE_URL"] != "" {
		out["OPS_DATABASE_USER"] = migrations.Role(service)
	}
	if _, set := out["OPS_REDIS_USERNAME"]; !set && out["OPS_REDIS_URL"] != "" && hasRedisUser(service) && redisUsers(t, out["OPS_REDIS_URL"]) {
		out["OPS_REDIS_USERNAME"], out["OPS_REDIS_PASSWORD"] = service, RedisPassword(service)
	}
	return out
}

// namesAdmin tells whether the database URL dsn is empty or names the administrator of
// AdminDatabaseURL (or no user). The test cluster trusts local connections: roles need no password.
func namesAdmin(t testing.TB, dsn string) bool {
	t.Helper()
	if dsn == "" {
		return true
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testenv: database URL: %v", err)
	}
	admin, err := url.Parse(AdminDatabaseURL())
	if err != nil {
		t.Fatalf("testenv: OPS_TEST_DATABASE_URL: %v", err)
	}
	return u.User == nil || u.User.Username() == "" || u.User.Username() == admin.User.Username()
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

// redisUsers makes sure the Redis at raw has the users of pkg/redisacl (applied through its
// default user: idempotent, so a Redis the test did not start through Redis gets them too) and
// tells whether it has. A URL with credentials, or a Redis that cannot take the users (not
// running: a test of an unreachable Redis), is false: the service then connects as the URL says.
func redisUsers(t testing.TB, raw string) bool {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.User != nil {
		return false
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return false
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.MaxRetries = time.Second, time.Second, time.Second, -1
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := redisacl.Apply(ctx, c, RedisPasswords()); err != nil {
		t.Logf("testenv: services connect to %s as Redis' default user: %v", u.Host, err)
		return false
	}
	return true
}
