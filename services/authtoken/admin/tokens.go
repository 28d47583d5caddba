package admin

import (
	"context"
	"errors"
)

// createServiceToken creates the service account (role service) if needed and prints a new API
// token for it.
func (e *Env) createServiceToken(ctx context.Context, args []string) error {
	_ = ctx
	_ = args
	return errors.New("create-service-token: not implemented yet")
}
