package authn

import (
	"context"
	"errors"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"

	"github.com/obsops/obsops/pkg/service"
)

// internalCaller is who called an internal route (InternalOp): trusted when the request
// carried the internal secret (another obsops service), and the caller's address.
type internalCaller struct {
	trusted bool
	addr    string
}

type internalCallerKey struct{}

// InternalOp marks op as an internal route (authtoken's token verification): its handler may
// call VerifyInternal, which needs to know whether the caller proved with the internal secret
// that it is an obsops service.
func (a *Authenticator) InternalOp(op huma.Operation) huma.Operation {
	op.Middlewares = append(op.Middlewares, func(ctx huma.Context, next func(huma.Context)) {
		c := humafiber.UnwrapV2(ctx)
		ic := internalCaller{trusted: service.Trusted(c), addr: service.ClientIP(c)}
		next(huma.WithContext(ctx, context.WithValue(ctx.Context(), internalCallerKey{}, ic)))
	})
	return op
}

// InternalTrusted reports whether the caller of an internal route (InternalOp) presented the
// internal secret, i.e. is an obsops service; false outside an InternalOp.
func InternalTrusted(ctx context.Context) bool {
	ic, _ := ctx.Value(internalCallerKey{}).(internalCaller)
	return ic.trusted
}

// TooManyFailuresError refuses a verification on the internal route: the caller's address has
// used up its failed-credential budget (429 with Retry-After).
type TooManyFailuresError struct {
	RetryAfter int // seconds
}

// Error says what happened.
func (e *TooManyFailuresError) Error() string {
	return "too many failed authentication attempts; retry after " + strconv.Itoa(e.RetryAfter) + " s"
}

// VerifyInternal verifies req on authtoken's internal verification route (an InternalOp).
//
// A caller that presented the internal secret is an obsops service verifying on behalf of its
// client: req.ClientIP is believed, and failures are not counted here, since the caller's own
// Authenticator counts them against that client (counting both would halve the budget). Any
// other caller — a pod or container that can reach authtoken without being one of the suite's
// services — is its own client: req.ClientIP is replaced by its address, and its failures count
// against that address's budget, beyond which it gets TooManyFailuresError. Either way the token
// is verified first, so a valid one is always accepted.
func (a *Authenticator) VerifyInternal(ctx context.Context, req VerifyRequest) (*Principal, error) {
	ic, _ := ctx.Value(internalCallerKey{}).(internalCaller)
	if !ic.trusted {
		req.ClientIP = ic.addr
	}
	vctx, cancel := a.verifyContext(ctx) // the caller gives up after its own bound: so does this
	p, err := a.Tokens.VerifyToken(vctx, req)
	cancel()
	if errors.Is(err, ErrInvalidCredential) && !ic.trusted {
		if retry := a.budget().Fail(ctx, req.ClientIP); retry > 0 {
			return nil, &TooManyFailuresError{RetryAfter: retry}
		}
	}
	return p, err
}
