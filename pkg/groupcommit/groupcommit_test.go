package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A burst of callers shares a few rounds, every caller's addition is in exactly one round, and
// each caller sees the round that holds its addition.
func TestBurstSharesRounds(t *testing.T) {
	var g Group[[]int]
	var rounds atomic.Int64
	var mu sync.Mutex
	seen := map[int]int{}
	do := func(b *[]int) error {
		rounds.Add(1)
		time.Sleep(5 * time.Millisecond) // an operation in flight while others arrive
		mu.Lock()
		for _, v := range *b {
			seen[v]++
		}
		mu.Unlock()
		return nil
	}
	const n = 500
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := g.Join(context.Background(), func(b *[]int) { *b = append(*b, i) }, do)
			if err != nil {
				t.Errorf("join %d: %v", i, err)
				return
			}
			found := false
			for _, v := range *b {
				found = found || v == i
			}
			if !found {
				t.Errorf("caller %d got a round without its addition", i)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if seen[i] != 1 {
			t.Fatalf("addition %d applied %d times", i, seen[i])
		}
	}
	if r := rounds.Load(); r >= n/2 {
		t.Fatalf("%d rounds for %d callers: not shared", r, n)
	}
	t.Logf("%d callers, %d rounds", n, rounds.Load())
}

// A caller whose context ends stops waiting; the round still runs and the group goes on.
func TestCallerGivesUp(t *testing.T) {
	var g Group[int]
	release := make(chan struct{})
	go func() { _, _ = g.Join(context.Background(), nil, func(*int) error { <-release; return nil }) }()
	time.Sleep(10 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Join(ctx, func(b *int) { *b++ }, func(*int) error { return nil }); err == nil {
		t.Fatal("expected the context's error")
	}
	close(release)
	b, err := g.Join(context.Background(), func(b *int) { *b += 10 }, func(*int) error { return nil })
	if err != nil || *b < 10 {
		t.Fatalf("group stuck after a caller gave up: %v %v", b, err)
	}
}
