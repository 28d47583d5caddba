// Package groupcommit shares one operation among the callers that arrive while another is in
// flight (a group commit): the first caller runs the operation at once; callers arriving
// meanwhile join the next round, which starts as soon as the one in flight returns. No caller
// waits for more than its own round and the one before it, and a burst of N callers costs about
// two operations instead of N — what makes a per-request Redis write (authn's token uses) or
// PostgreSQL read (ingest's commit positions) cheap at thousands of requests per second.
package groupcommit

import (
	"context"
	"sync"
)

// Group gathers callers into rounds; each round is one operation on a batch of type B, built by
// the callers' add functions. The zero Group is ready to use.
type Group[B any] struct {
	mu      sync.Mutex
	running bool
	next    *round[B] // the round callers join now (nil: none yet)
}

type round[B any] struct {
	batch B
	done  chan struct{}
	err   error
}

// Join adds to the next round's batch with add (run under the group's lock; nil adds nothing)
// and waits for that round: its batch as do left it (for results do writes into it) and do's
// error. The caller that starts a round runs do, so every caller of a group passes the same
// operation. A caller whose ctx ends stops waiting (the round still runs) and gets ctx's error.
func (g *Group[B]) Join(ctx context.Context, add func(*B), do func(*B) error) (*B, error) {
	g.mu.Lock()
	r := g.next
	if r == nil {
		r = &round[B]{done: make(chan struct{})}
		g.next = r
	}
	if add != nil {
		add(&r.batch)
	}
	lead := !g.running
	if lead {
		g.running, g.next = true, nil
	}
	g.mu.Unlock()
	if lead {
		g.run(r, do)
	}
	select {
	case <-r.done:
		return &r.batch, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run performs r, then hands the round that gathered meanwhile to a goroutine of its own.
func (g *Group[B]) run(r *round[B], do func(*B) error) {
	r.err = do(&r.batch)
	close(r.done)
	g.mu.Lock()
	next := g.next
	g.next, g.running = nil, next != nil
	g.mu.Unlock()
	if next != nil {
		go g.run(next, do)
	}
}
