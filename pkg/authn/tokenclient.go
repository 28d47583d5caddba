package authn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/obsops/obsops/pkg/contract"
)

// ErrInvalidCredential means the presented credential is unknown, inactive, expired, malformed
// or badly signed: the request is not authenticated (401).
var ErrInvalidCredential = errors.New("invalid credential")

// InsufficientScopeError means a valid API token lacks scopes the route needs (403).
type InsufficientScopeError struct {
	Missing []string
}

// Error names the missing scopes.
func (e *InsufficientScopeError) Error() string {
	return fmt.Sprintf("token lacks scope(s) %v", e.Missing)
}

// TokenVerifier verifies an API token (by its SHA-256, active, unexpired, with the route's scopes) and, on success, records its use.
type TokenVerifier interface {
	VerifyToken(ctx context.Context, req VerifyRequest) (*Principal, error)
}

// VerifyRequest is the body of authtoken's internal verification endpoint.
type VerifyRequest struct {
	Token    string   `json:"token"`
	Scopes   []string `json:"scopes,omitempty"`
	ClientIP string   `json:"client_ip,omitempty"`
}

// VerifyPath is authtoken's internal verification endpoint. The gateway never routes /internal/*.
const VerifyPath = contract.TokenVerifyPath

// VerifyFailure is the body of a refused verification.
type VerifyFailure struct {
	Error   string   `json:"error"` // invalid_token or insufficient_scope
	Missing []string `json:"missing,omitempty"`
}

// RemoteTokens verifies API tokens at the authtoken service, which owns the token table.
type RemoteTokens struct {
	BaseURL string
	HTTP    *http.Client
	// Secret is the suite's internal secret (OPS_INTERNAL_SECRET): with it authtoken believes
	// the client_ip of a verification and leaves the failure budget to this service.
	Secret string
}

// NewRemoteTokens returns a verifier calling the authtoken service at baseURL with the internal
// secret.
func NewRemoteTokens(baseURL, secret string) *RemoteTokens {
	return &RemoteTokens{BaseURL: baseURL, Secret: secret, HTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
	}}}
}

// VerifyToken asks authtoken to verify req.
func (r *RemoteTokens) VerifyToken(ctx context.Context, req VerifyRequest) (*Principal, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.BaseURL+VerifyPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if r.Secret != "" {
		hreq.Header.Set(contract.InternalSecretHeader, r.Secret)
	}
	resp, err := r.HTTP.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("verify token at authtoken: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<16))
	switch resp.StatusCode {
	case http.StatusOK:
		var p Principal
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("decode verification: %w", err)
		}
		p.Method = MethodAPIToken
		return &p, nil
	case http.StatusUnauthorized, http.StatusTooManyRequests:
		// 429: this service did not prove itself with the internal secret and its own address
		// is over its failure budget at authtoken; the token did not verify either way.
		return nil, ErrInvalidCredential
	case http.StatusForbidden:
		var f VerifyFailure
		_ = dec.Decode(&f)
		return nil, &InsufficientScopeError{Missing: f.Missing}
	default:
		return nil, fmt.Errorf("verify token at authtoken: status %d", resp.StatusCode)
	}
}
