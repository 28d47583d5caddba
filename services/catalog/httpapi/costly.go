package httpapi

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
)

// CostBound bounds the costly computations — visibility over a range, heatmaps computed on the
// spot, source searches — that one replica runs at once, in all and per user. Without it one
// viewer's eight parallel long visibility requests took both cores of a replica and moved
// another user's GET /sources/1 from p95 3.4 ms to 409 ms. Beyond the user's share the answer is
// 429 (that user should wait for their own requests), beyond the replica's 503 (another replica
// may have room); both with Retry-After: 1. The counts are per replica: the bound is on CPU,
// which is per replica too.
type CostBound struct {
	perUser, perReplica int

	mu      sync.Mutex
	running int
	byUser  map[int64]int
}

// NewCostBound allows perUser costly requests of one user and perReplica in all at once.
func NewCostBound(perUser, perReplica int) *CostBound {
	return &CostBound{perUser: perUser, perReplica: perReplica, byUser: map[int64]int{}}
}

// acquire takes a slot for user, or says which bound refused it (429 or 503).
func (b *CostBound) acquire(user int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.byUser[user] >= b.perUser:
		return http.StatusTooManyRequests
	case b.running >= b.perReplica:
		return http.StatusServiceUnavailable
	}
	b.byUser[user]++
	b.running++
	return 0
}

func (b *CostBound) release(user int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running--
	if b.byUser[user]--; b.byUser[user] <= 0 {
		delete(b.byUser, user)
	}
}

// Costly returns op bounded by b (op as it is when b is nil). Apply it after the access check
// (Auth.Op), whose principal names the user.
func (b *CostBound) Costly(api huma.API, op huma.Operation) huma.Operation {
	if b == nil {
		return op
	}
	op.Errors = append(op.Errors, http.StatusTooManyRequests, http.StatusServiceUnavailable)
	op.Middlewares = append(op.Middlewares, func(ctx huma.Context, next func(huma.Context)) {
		var user int64
		if p := authn.PrincipalFrom(ctx.Context()); p != nil {
			user = p.UserID
		}
		switch b.acquire(user) {
		case http.StatusTooManyRequests:
			ctx.SetHeader("Retry-After", "1")
			_ = huma.WriteErr(api, ctx, http.StatusTooManyRequests, "at most "+strconv.Itoa(b.perUser)+
				" costly requests (visibility, heatmaps, source searches) of one user run at a time on a replica; retry after 1 s")
			return
		case http.StatusServiceUnavailable:
			ctx.SetHeader("Retry-After", "1")
			_ = huma.WriteErr(api, ctx, http.StatusServiceUnavailable, "this replica is running as many costly requests as it may ("+
				strconv.Itoa(b.perReplica)+"); retry after 1 s")
			return
		}
		defer b.release(user)
		next(ctx)
	})
	return op
}
