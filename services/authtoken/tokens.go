package authtoken

import (
	"context"

	"github.com/obsops/obsops/pkg/authn"
)

// TokenService owns API tokens: their lifecycle, verification (SPEC §5.2) and usage counters.
type TokenService struct{}

// VerifyToken verifies an API token and records its use.
func (s *TokenService) VerifyToken(_ context.Context, _ authn.VerifyRequest) (*authn.Principal, error) {
	return nil, authn.ErrInvalidCredential
}
