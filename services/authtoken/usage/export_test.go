package usage

import (
	"context"
	"time"

	"github.com/obsops/obsops/services/authtoken"
)

// Steps of a flush, for tests that stop between them as a crash would.

func (c *Counter) ClaimFlush(ctx context.Context) (string, error) {
	return c.claimFlush(ctx, time.Now())
}

func (c *Counter) UnfinishedFlushes(ctx context.Context) ([]string, error) {
	return c.unfinishedFlushes(ctx)
}

func (c *Counter) ReadFlush(ctx context.Context, id string) ([]authtoken.UsageDelta, error) {
	return c.readFlush(ctx, id)
}
