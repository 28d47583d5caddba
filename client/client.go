// Package client is the typed Go client of the obsops API, for programs (movers, instrument
// software, the obsops command) that talk to a gateway. The operations are generated from the
// gateway's OpenAPI document (package api, `make generate`); this package adds what every
// caller needs: the base URL and credential, request ids, retries of 429/502/503/504 that honour
// Retry-After and resend the same Idempotency-Key, pagination iterators, and problem+json
// answers as Go errors (*Problem) that name the offending field.
//
//	c, err := client.New(client.Options{BaseURL: "https://obsops.example.org", Token: os.Getenv("OBSOPS_TOKEN")})
//	resp, err := c.API.GetMeWithResponse(ctx)
//	if err := client.Check(resp.HTTPResponse, resp.Body, err); err != nil { ... }
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/client/api"
)

// Options configure a Client.
type Options struct {
	BaseURL string // the gateway, e.g. https://obsops.example.org (no trailing path needed)
	// Token is sent as Authorization: Bearer: a session JWT (obsops login) or an API token
	// (ops_api_token_…). Empty: anonymous requests.
	Token string
	// HTTPClient does the requests (default: one with a 60 s timeout).
	HTTPClient *http.Client
	// MaxRetries is how many times a request answered 429/502/503/504 (or not answered at all,
	// for requests safe to repeat) is sent again; 0 means 4, negative means never.
	MaxRetries int
	// MaxWait bounds one wait between attempts, whatever Retry-After says (default 30 s).
	MaxWait time.Duration
	// UserAgent is sent as User-Agent (default "obsops-go-client").
	UserAgent string
}

// Client is a configured obsops client: API is the generated client, every request going
// through the retrying, authenticating transport.
type Client struct {
	API     *api.ClientWithResponses
	BaseURL string
	HTTP    *http.Client // the client API uses (its Transport retries and authenticates)
}

// New returns a client for opts.
func New(opts Options) (*Client, error) {
	base := strings.TrimRight(opts.BaseURL, "/")
	if base == "" {
		return nil, errors.New("client: BaseURL is required")
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	inner := hc.Transport
	if inner == nil {
		inner = http.DefaultTransport
	}
	retries := opts.MaxRetries
	switch {
	case retries == 0:
		retries = 4
	case retries < 0:
		retries = 0
	}
	wait := opts.MaxWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	ua := opts.UserAgent
	if ua == "" {
		ua = "obsops-go-client"
	}
	wrapped := *hc
	wrapped.Transport = &Transport{Base: inner, Token: opts.Token, MaxRetries: retries, MaxWait: wait, UserAgent: ua}
	c, err := api.NewClientWithResponses(base, api.WithHTTPClient(&wrapped))
	if err != nil {
		return nil, err
	}
	return &Client{API: c, BaseURL: base, HTTP: &wrapped}, nil
}

// Transport authenticates requests, gives each an X-Request-ID, and retries answers that say
// "later" (429, 502, 503, 504) after Retry-After (or an exponential backoff), resending the same
// body and the same Idempotency-Key, so a retried write is applied once. Requests that are not
// idempotent (POST, PATCH without an Idempotency-Key) are retried only when the server answered,
// never after a connection error: the write may have happened.
type Transport struct {
	Base       http.RoundTripper
	Token      string
	MaxRetries int
	MaxWait    time.Duration
	UserAgent  string
}

// RoundTrip sends req, retrying as described on Transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if t.Token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	if req.Header.Get("X-Request-ID") == "" {
		req.Header.Set("X-Request-ID", NewRequestID())
	}
	if t.UserAgent != "" && req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", t.UserAgent)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	safe := req.Header.Get("Idempotency-Key") != ""
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		safe = true
	}
	for attempt := 0; ; attempt++ {
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
		}
		resp, err := t.Base.RoundTrip(req)
		if attempt >= t.MaxRetries {
			return resp, err
		}
		var wait time.Duration
		switch {
		case err != nil:
			if !safe || req.Context().Err() != nil {
				return nil, err
			}
			wait = backoff(attempt)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
			resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			wait = retryAfter(resp.Header.Get("Retry-After"), backoff(attempt))
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
		default:
			return resp, nil
		}
		wait = min(wait, t.MaxWait)
		timer := time.NewTimer(wait)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
	}
}

// backoff is 250 ms doubled per attempt, at most 8 s.
func backoff(attempt int) time.Duration {
	return min(250*time.Millisecond<<attempt, 8*time.Second)
}

// retryAfter reads Retry-After (seconds or an HTTP date), else def.
func retryAfter(v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return def
}

// NewRequestID returns a random request id (32 hex characters), as X-Request-ID.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewIdempotencyKey returns a random Idempotency-Key for one logical write; reuse it for every
// attempt of that write.
func NewIdempotencyKey() string { return "cli-" + NewRequestID() }

// WithIdempotencyKey is a request editor setting Idempotency-Key on routes that do not declare it.
func WithIdempotencyKey(key string) api.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Idempotency-Key", key)
		return nil
	}
}

// Ptr returns a pointer to v, for the optional fields of the generated types.
func Ptr[T any](v T) *T { return &v }

// Unreachable is an error that means the gateway could not be reached (no answer at all).
type Unreachable struct{ Err error }

// Error says the gateway could not be reached and why.
func (e *Unreachable) Error() string { return fmt.Sprintf("obsops unreachable: %v", e.Err) }

// Unwrap returns the cause.
func (e *Unreachable) Unwrap() error { return e.Err }
