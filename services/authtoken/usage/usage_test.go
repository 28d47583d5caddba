package usage_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
	"github.com/obsops/obsops/services/authtoken/usage"
)

// newTokens creates n tokens of one user and returns their ids.
func newTokens(t *testing.T, env *tokentest.Env, n int) []int64 {
	t.Helper()
	owner := env.User(t, "owner")
	var ids []int64
	for range n {
		tok, err := env.Service().Create(context.Background(), owner, authtoken.TokenSpec{Name: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	return ids
}

func record(t *testing.T, c *usage.Counter, tokenID int64, n int) {
	t.Helper()
	for range n {
		if err := c.Record(context.Background(), tokenID, time.Now(), "192.0.2.7"); err != nil {
			t.Fatal(err)
		}
	}
}

func wantCommitted(t *testing.T, env *tokentest.Env, tokenID, want int64) {
	t.Helper()
	if got := env.CommittedUses(t, tokenID); got != want {
		t.Fatalf("token %d: usage_count %d in PostgreSQL, want %d", tokenID, got, want)
	}
}

func wantNoUnfinished(t *testing.T, c *usage.Counter) {
	t.Helper()
	left, err := c.UnfinishedFlushes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("unfinished flushes left in Redis: %v", left)
	}
}

func TestConcurrentUsesAreFlushedExactly(t *testing.T) {
	env := tokentest.New(t)
	ids := newTokens(t, env, 3)
	const workers, perWorker = 16, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { record(t, env.Counter, ids[w%len(ids)], perWorker) })
	}
	wg.Wait()

	res, err := env.Flusher().Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Flushes != 1 || res.Uses != workers*perWorker {
		t.Fatalf("flush result %+v, want 1 flush of %d uses", res, workers*perWorker)
	}
	for i, id := range ids {
		want := int64(perWorker * ((workers + len(ids) - 1 - i) / len(ids)))
		wantCommitted(t, env, id, want)
	}
	var ip string
	if err := env.DB.Get(&ip, `SELECT last_used_ip FROM api_tokens WHERE id = $1`, ids[0]); err != nil || ip != "192.0.2.7" {
		t.Fatalf("last_used_ip %q (%v), want 192.0.2.7", ip, err)
	}
	wantNoUnfinished(t, env.Counter)

	// Nothing pending: a second round changes nothing.
	if res, err := env.Flusher().Flush(context.Background()); err != nil || res.Flushes != 0 {
		t.Fatalf("idle flush: %+v, %v", res, err)
	}
}

// A crash after claiming (before the database commit) leaves the flush in Redis; the next
// process applies it.
func TestFlushLeftAfterClaimIsApplied(t *testing.T) {
	env := tokentest.New(t)
	id := newTokens(t, env, 1)[0]
	ctx := context.Background()
	record(t, env.Counter, id, 5)
	if f, err := env.Counter.ClaimFlush(ctx); err != nil || f == "" {
		t.Fatalf("claim: %q, %v", f, err)
	}
	record(t, env.Counter, id, 3) // uses after the crashed claim
	wantCommitted(t, env, id, 0)

	res, err := env.Flusher().Flush(ctx) // a fresh process
	if err != nil {
		t.Fatal(err)
	}
	if res.Flushes != 2 || res.Uses != 8 || res.Skipped != 0 {
		t.Fatalf("recovery result %+v, want the left flush and the new one, 8 uses", res)
	}
	wantCommitted(t, env, id, 8)
	wantNoUnfinished(t, env.Counter)
}

// A crash after the database commit (before Redis forgets the flush) must not count twice.
func TestFlushLeftAfterCommitIsNotCountedTwice(t *testing.T) {
	env := tokentest.New(t)
	id := newTokens(t, env, 1)[0]
	ctx := context.Background()
	record(t, env.Counter, id, 7)
	f, err := env.Counter.ClaimFlush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deltas, err := env.Counter.ReadFlush(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := env.Store.ApplyUsage(ctx, f, deltas); err != nil || !applied {
		t.Fatalf("apply: %v, %v", applied, err)
	}
	wantCommitted(t, env, id, 7)

	res, err := env.Flusher().Flush(ctx) // a fresh process finds the flush still in Redis
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 1 || res.Flushes != 0 {
		t.Fatalf("replay result %+v, want 1 skipped", res)
	}
	wantCommitted(t, env, id, 7)
	wantNoUnfinished(t, env.Counter)
}

// Replicas flush concurrently, each finishing the others' flushes too: every use counts once.
func TestConcurrentFlushersCountEveryUseOnce(t *testing.T) {
	env := tokentest.New(t)
	ids := newTokens(t, env, 4)
	ctx := context.Background()
	stop := make(chan struct{})
	var flushers sync.WaitGroup
	for range 3 {
		f := env.Flusher()
		flushers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.Flush(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var users sync.WaitGroup
	for w := range 8 {
		users.Go(func() { record(t, env.Counter, ids[w%4], 250) })
	}
	users.Wait()
	close(stop)
	flushers.Wait()
	if _, err := env.Flusher().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		wantCommitted(t, env, id, 500)
	}
	wantNoUnfinished(t, env.Counter)
}

func TestPendingSeesUnclaimedAndInFlightUses(t *testing.T) {
	env := tokentest.New(t)
	ids := newTokens(t, env, 2)
	ctx := context.Background()
	record(t, env.Counter, ids[0], 4)
	before, err := env.Counter.Pending(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := env.Counter.ClaimFlush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	record(t, env.Counter, ids[0], 2)
	record(t, env.Counter, ids[1], 9)
	p, err := env.Counter.Pending(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if before.Unclaimed.Count != 4 || p.Unclaimed.Count != 2 || p.InFlight[f].Count != 4 || len(p.InFlight) != 1 {
		t.Fatalf("pending before claim %+v, after %+v (flush %s)", before, p, f)
	}
	if p.Generation != before.Generation+1 {
		t.Fatalf("generation %d after a claim, was %d", p.Generation, before.Generation)
	}
	if p.Unclaimed.LastUsedIP != "192.0.2.7" || time.Since(p.Unclaimed.LastUsedAt) > time.Minute {
		t.Fatalf("last use %+v", p.Unclaimed)
	}
}

// An older use applied after a newer one (a replayed flush) does not move last_used_at back.
func TestLastUseNeverMovesBack(t *testing.T) {
	env := tokentest.New(t)
	id := newTokens(t, env, 1)[0]
	ctx := context.Background()
	newer := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := env.Store.ApplyUsage(ctx, "f-new", []authtoken.UsageDelta{{TokenID: id, Count: 1, LastUsedAt: newer, LastUsedIP: "192.0.2.1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.ApplyUsage(ctx, "f-old", []authtoken.UsageDelta{{TokenID: id, Count: 2, LastUsedAt: newer.Add(-time.Hour), LastUsedIP: "192.0.2.2"}}); err != nil {
		t.Fatal(err)
	}
	var row struct {
		At time.Time `db:"last_used_at"`
		IP string    `db:"last_used_ip"`
		N  int64     `db:"usage_count"`
	}
	if err := env.DB.Get(&row, `SELECT last_used_at, last_used_ip, usage_count FROM api_tokens WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if !row.At.Equal(newer) || row.IP != "192.0.2.1" || row.N != 3 {
		t.Fatalf("row %+v, want last use %s from 192.0.2.1 and 3 uses", row, newer)
	}
}

// Stop flushes what is pending, so a clean shutdown leaves nothing in Redis.
func TestStopFlushesPendingUses(t *testing.T) {
	env := tokentest.New(t)
	id := newTokens(t, env, 1)[0]
	f := usage.NewFlusher(env.Counter, env.Store, time.Hour, nil, nil)
	record(t, env.Counter, id, 1) // committed by the first round, at start
	f.Start()
	for deadline := time.Now().Add(10 * time.Second); env.CommittedUses(t, id) != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the first round did not commit the use recorded before it")
		}
		runtime.Gosched()
	}
	record(t, env.Counter, id, 11) // the next round is an hour away: only Stop can commit these
	if err := f.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantCommitted(t, env, id, 12)
	wantNoUnfinished(t, env.Counter)
}

// Applied flush ids are pruned after their retention, except ones still unfinished in Redis.
func TestPruneKeepsUnfinishedFlushes(t *testing.T) {
	env := tokentest.New(t)
	ctx := context.Background()
	for _, f := range []string{"old-done", "old-unfinished", "recent"} {
		if _, err := env.Store.ApplyUsage(ctx, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	env.Exec(t, `UPDATE token_usage_flushes SET applied_at = now() - interval '30 days' WHERE flush_id LIKE 'old-%'`)
	n, err := env.Store.PruneUsageFlushes(ctx, time.Now().Add(-7*24*time.Hour), []string{"old-unfinished"})
	if err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	var left []string
	if err := env.DB.Select(&left, `SELECT flush_id FROM token_usage_flushes ORDER BY flush_id`); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != "old-unfinished" || left[1] != "recent" {
		t.Fatalf("left %v", left)
	}
}

// outageSink is the token store with an outage switch (a secondary site's main database
// behind a cut WAN).
type outageSink struct {
	authtoken.UsageSink
	down bool
}

func (s *outageSink) ApplyUsage(ctx context.Context, id string, d []authtoken.UsageDelta) (bool, error) {
	if s.down {
		return false, errors.New("main site unreachable")
	}
	return s.UsageSink.ApplyUsage(ctx, id, d)
}

// While the database fails, uses keep being counted and no flush is claimed per round (an
// outage of hours must not leave thousands of flushes); when it returns, everything is applied
// exactly once.
func TestOutageClaimsNoFlushPerRound(t *testing.T) {
	env := tokentest.New(t)
	id := newTokens(t, env, 1)[0]
	ctx := context.Background()
	sink := &outageSink{UsageSink: env.Store, down: true}
	f := usage.NewFlusher(env.Counter, sink, 0, nil, nil)
	for round := range 5 {
		record(t, env.Counter, id, 4)
		if _, err := f.Flush(ctx); err == nil {
			t.Fatalf("round %d: flush succeeded during the outage", round)
		}
		left, err := env.Counter.UnfinishedFlushes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 1 {
			t.Fatalf("round %d: %d unfinished flushes, want the first one only", round, len(left))
		}
	}
	wantCommitted(t, env, id, 0)
	sink.down = false
	res, err := f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Flushes != 2 || res.Uses != 20 {
		t.Fatalf("after the outage %+v, want 2 flushes of 20 uses", res)
	}
	wantCommitted(t, env, id, 20)
	wantNoUnfinished(t, env.Counter)
}
