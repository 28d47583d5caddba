package redisacl_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/redisacl"
	"github.com/obsops/obsops/pkg/testenv"
)

// noperm fails unless err is Redis' refusal of an ACL user (NOPERM, or the same refusal from
// inside a script).
func noperm(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !(strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access at least one of the keys")) {
		t.Errorf("%s: got %v, want NOPERM", what, err)
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && err != redis.Nil {
		t.Errorf("%s: %v", what, err)
	}
}

// TestOneServiceCannotReachAnothersKeys: with the users of users.acl (as testenv gives every test
// Redis), a service's user reaches its own keys and is refused another's (NOPERM), the dangerous
// commands, and channels it does not own; KEDA's user may only read the queue's length.
func TestOneServiceCannotReachAnothersKeys(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	catalog, ingest, site, keda, gateway := r.UserClient("catalog"), r.UserClient("ingest"), r.UserClient("site"), r.UserClient("keda"), r.UserClient("gateway")

	ok(t, "ingest writes its buffer", ingest.HSet(ctx, "ingest:rec:files", "x", "1").Err())
	ok(t, "ingest queues a task", ingest.LPush(ctx, "asynq:{ingest}:pending", "t1").Err())
	noperm(t, "catalog reads ingest's buffer", catalog.HGetAll(ctx, "ingest:rec:files").Err())
	noperm(t, "catalog reads authtoken's token cache", catalog.Get(ctx, "ops:{tokencache}:abc").Err())
	noperm(t, "ingest reads authtoken's OAuth state", ingest.Get(ctx, "ops:oidc:state:abc").Err())
	noperm(t, "catalog writes the user directory", catalog.HSet(ctx, "ops:{users}:directory", "1", "x").Err())
	ok(t, "catalog reads the user directory", catalog.HGet(ctx, "ops:{users}:directory", "1").Err())
	ok(t, "catalog caches a resolution", catalog.Set(ctx, "ops:catalog:sesame:v1:m31", "x", 0).Err())
	noperm(t, "catalog flushes the database", catalog.FlushAll(ctx).Err())
	noperm(t, "catalog lists every key", catalog.Keys(ctx, "*").Err())
	noperm(t, "gateway publishes transfer's overview", gateway.Publish(ctx, "ops:transfer:overview", "x").Err())
	ok(t, "gateway counts a failed credential", gateway.Incr(ctx, "ops:authfail:10.0.0.1").Err())

	ok(t, "site reads the ingest queue's length", site.LLen(ctx, "asynq:{ingest}:pending").Err())
	ok(t, "site reads through a script", site.Eval(ctx, "return redis.call('LLEN', KEYS[1])", []string{"asynq:{ingest}:pending"}).Err())
	noperm(t, "site writes the ingest queue", site.LPush(ctx, "asynq:{ingest}:pending", "t2").Err())
	noperm(t, "site writes the ingest queue through a script", site.Eval(ctx, "return redis.call('LPUSH', KEYS[1], 't3')", []string{"asynq:{ingest}:pending"}).Err())

	n, err := keda.LLen(ctx, "asynq:{ingest}:pending").Result()
	if err != nil || n != 1 {
		t.Errorf("keda reads the pending length: %d, %v; want 1", n, err)
	}
	noperm(t, "keda reads a task", keda.HGetAll(ctx, "asynq:{ingest}:t:t1").Err())
	noperm(t, "keda writes the queue", keda.LPush(ctx, "asynq:{ingest}:pending", "t4").Err())

	wrong := redis.NewClient(&redis.Options{Addr: r.Addr, Username: "catalog", Password: "not-its-password"})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a wrong password: %v, want WRONGPASS", err)
	}
}

// TestApplyIsIdempotentAndExact: applying again changes nothing, and a user's rules are the
// file's (a rule added by hand is gone after Apply).
func TestApplyIsIdempotentAndExact(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	admin := r.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "catalog", "~ingest:*").Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisacl.Apply(ctx, admin, testenv.RedisPasswords()); err != nil {
		t.Fatal(err)
	}
	if err := redisacl.Apply(ctx, admin, testenv.RedisPasswords()); err != nil {
		t.Fatal(err)
	}
	noperm(t, "catalog reads ingest's keys after Apply", r.UserClient("catalog").Get(ctx, "ingest:stats:last_apply").Err())
	if got := len(redisacl.Users()); got != 7 {
		t.Errorf("%d users in users.acl, want 7 (6 binaries and KEDA)", got)
	}
}
