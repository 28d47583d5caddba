package authtoken_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/usage"
)

// benchKnob reads a positive integer setting of `make bench` (deploy/local/stack.sh), or its default.
func benchKnob(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchRun is what one path achieved.
type benchRun struct {
	ok       int64
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r benchRun) perSecond() float64 { return float64(r.ok) / r.elapsed.Seconds() }

// hammer verifies raw from callers goroutines for d and measures every call.
func hammer(t *testing.T, s *authtoken.TokenService, raw string, callers int, d time.Duration) benchRun {
	t.Helper()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range callers {
		wg.Go(func() {
			var mine []time.Duration
			req := authn.VerifyRequest{Token: raw, Scopes: []string{"read:data"}, ClientIP: "192.0.2.10"}
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if _, err := s.VerifyToken(context.Background(), req); err != nil {
					t.Errorf("verify: %v", err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := benchRun{ok: int64(len(all)), elapsed: time.Since(start)}
	slices.Sort(all)
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

// TestBenchTokenVerification (OPS_BENCH=1, `make bench`): one hot token verified by many
// concurrent callers, through our path (token record cached in Redis, indexed lookup only on a
// miss + usage counted in Redis, flushed to PostgreSQL every second in one batched statement)
// and, in the same run against the same database, the naive path (the indexed lookup on every
// request + one UPDATE of the token row per request). It
// prints verifications/s and latency of both, the ratio (target >= 5x), and checks that the
// committed usage counts equal the successful verifications within 5 s.
func TestBenchTokenVerification(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	seconds, callers := benchKnob("OPS_BENCH_SECONDS", 5), benchKnob("OPS_BENCH_CONCURRENCY", 32)
	env := tokentest.New(t)
	db, err := database.Open(env.DatabaseURL, 10) // the service's default pool (OPS_DB_MAX_CONNS)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := &postgres.Tokens{DB: db}
	ours := &authtoken.TokenService{Store: store, Accounts: env.Users, Counter: env.Counter, Cache: env.Cache, Limits: tokentest.Limits()}
	naive := &authtoken.TokenService{Store: store, Accounts: env.Users, Limits: tokentest.Limits()} // no counter: UPDATE per request
	owner := env.User(t, "bench")
	spec := authtoken.TokenSpec{Name: "hot", Scopes: []string{"read:*"}}
	oursTok, err := ours.Create(context.Background(), owner, spec)
	if err != nil {
		t.Fatal(err)
	}
	naiveTok, err := naive.Create(context.Background(), owner, spec)
	if err != nil {
		t.Fatal(err)
	}
	flusher := usage.NewFlusher(env.Counter, store, time.Second, nil, nil) // the default interval
	flusher.Start()

	d := time.Duration(seconds) * time.Second
	// Warm up pools and plans; every successful call counts, so the totals include these.
	oursWant := hammer(t, ours, oursTok.Secret, callers, d/5).ok
	naiveWant := hammer(t, naive, naiveTok.Secret, callers, d/5).ok

	fast := hammer(t, ours, oursTok.Secret, callers, d)
	oursWant += fast.ok
	fastDone := time.Now()
	// Our uses must be committed to PostgreSQL within 5 s, by the running flusher alone.
	var committedAfter time.Duration
	for {
		got := env.CommittedUses(t, oursTok.ID)
		if got == oursWant {
			committedAfter = time.Since(fastDone)
			break
		}
		if got > oursWant || time.Since(fastDone) > 5*time.Second {
			t.Fatalf("usage_count %d %s after the run, want %d successful verifications", got, time.Since(fastDone), oursWant)
		}
		time.Sleep(10 * time.Millisecond)
	}

	slow := hammer(t, naive, naiveTok.Secret, callers, d)
	naiveWant += slow.ok
	if got := env.CommittedUses(t, naiveTok.ID); got != naiveWant {
		t.Fatalf("naive usage_count %d, want %d", got, naiveWant)
	}

	ratio := fast.perSecond() / slow.perSecond()
	verdict := "PASS"
	if ratio < 5 {
		verdict = "MISS"
	}
	t.Logf("token verification, one hot token, %d concurrent callers, %d s per path, same run:", callers, seconds)
	t.Logf("  ours  (Redis cache + count, batched): %9.0f verifications/s  p50 %8s  p99 %8s", fast.perSecond(), fast.p50, fast.p99)
	t.Logf("  naive (UPDATE row per request):      %9.0f verifications/s  p50 %8s  p99 %8s", slow.perSecond(), slow.p50, slow.p99)
	t.Logf("  ratio %.1fx (target >= 5x): %s", ratio, verdict)
	t.Logf("  usage counts exact: ours %d committed %s after the run (target <= 5 s): PASS; naive %d",
		oursWant, committedAfter.Round(time.Millisecond), naiveWant)
	if err := flusher.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
