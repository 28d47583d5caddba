package site

import (
	"testing"
	"time"
)

// The replay rate is the processed total's growth over the last minute; asked often, the
// history stays bounded; a counter reset reads 0, never negative.
func TestReplayRate(t *testing.T) {
	m := &Monitor{}
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	if r := m.replayRate(t0, 100); r != 0 {
		t.Fatalf("one sample: %v", r)
	}
	for i := 1; i <= 1000; i++ { // every 10 ms for 10 s, 20 tasks a second
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		m.replayRate(at, 100+i/5)
	}
	if len(m.history) > 12 {
		t.Fatalf("history of %d samples for 10 s", len(m.history))
	}
	if r := m.replayRate(t0.Add(10*time.Second), 300); r < 19.9 || r > 20.1 {
		t.Fatalf("rate %v, want 20/s", r)
	}
	for i := 11; i <= 130; i++ { // two idle minutes: the window forgets the old work
		m.replayRate(t0.Add(time.Duration(i)*time.Second), 300)
	}
	if r := m.replayRate(t0.Add(131*time.Second), 300); r != 0 {
		t.Fatalf("idle rate %v", r)
	}
	if r := m.replayRate(t0.Add(132*time.Second), 5); r != 0 {
		t.Fatalf("after a counter reset: %v", r)
	}
}
