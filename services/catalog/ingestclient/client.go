// Package ingestclient is the catalog's adapter to the ingest service's internal obs-unit fence
// routes (pkg/contract/fences.go): it implements catalog.Executions over HTTP, with the suite's
// internal secret.
package ingestclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/services/catalog"
)

// Client calls ingest's internal fence routes.
type Client struct {
	BaseURL string // OPS_INGEST_URL
	Secret  string // OPS_INTERNAL_SECRET: ingest refuses the routes without it
	HTTP    *http.Client
}

// New returns a client of the ingest service at baseURL.
func New(baseURL, secret string) *Client {
	return &Client{BaseURL: baseURL, Secret: secret, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

var _ catalog.Executions = (*Client)(nil)

// call posts req to path and decodes a 200 answer into out (nil: none expected). A 409 is
// catalog.ErrFenceLost; anything else that is not a success is catalog.ErrIngestUnavailable.
func (c *Client) call(ctx context.Context, path string, req any, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.Secret != "" {
		hreq.Header.Set(contract.InternalSecretHeader, c.Secret)
	}
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		return fmt.Errorf("%w: %v", catalog.ErrIngestUnavailable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusConflict:
		return catalog.ErrFenceLost
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: ingest refused the internal call (is OPS_INTERNAL_SECRET set, and the same, in catalog and ingest?)", catalog.ErrIngestUnavailable)
	case resp.StatusCode >= 300:
		return fmt.Errorf("%w: ingest answered %d", catalog.ErrIngestUnavailable, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%w: unreadable answer: %v", catalog.ErrIngestUnavailable, err)
		}
	}
	return nil
}

// Fence fences the obs units and returns their buffered executions.
func (c *Client) Fence(ctx context.Context, token string, obsUnitIDs []int64) ([]catalog.ExecutionRef, error) {
	var a contract.FenceAnswer
	if err := c.call(ctx, contract.ObsUnitFencePath, contract.FenceRequest{Token: token, ObsUnitIDs: obsUnitIDs}, &a); err != nil {
		return nil, err
	}
	out := make([]catalog.ExecutionRef, len(a.Executions))
	for i, x := range a.Executions {
		out[i] = catalog.ExecutionRef{ID: x.ID, ObsUnitID: x.ObsUnitID, Buffered: true}
	}
	return out, nil
}

// Seal turns the delete's fences into tombstones.
func (c *Client) Seal(ctx context.Context, token string, obsUnitIDs []int64) error {
	return c.call(ctx, contract.ObsUnitSealPath, contract.FenceRequest{Token: token, ObsUnitIDs: obsUnitIDs}, nil)
}

// Release removes the delete's fences and tombstones.
func (c *Client) Release(ctx context.Context, token string, obsUnitIDs []int64) error {
	return c.call(ctx, contract.ObsUnitReleasePath, contract.FenceRequest{Token: token, ObsUnitIDs: obsUnitIDs}, nil)
}

// Pending answers the obs units' completed executions that ingest acknowledged and still holds in
// its buffer (catalog.PendingExecutions), asked in batches of at most 500 units.
func (c *Client) Pending(ctx context.Context, obsUnitIDs []int64) (map[int64]catalog.ExecutedTime, error) {
	out := map[int64]catalog.ExecutedTime{}
	for i := 0; i < len(obsUnitIDs); i += 500 {
		var a contract.PendingAnswer
		if err := c.call(ctx, contract.ObsUnitPendingPath, contract.PendingRequest{ObsUnitIDs: obsUnitIDs[i:min(i+500, len(obsUnitIDs))]}, &a); err != nil {
			return nil, err
		}
		for _, u := range a.Units {
			x := out[u.ObsUnitID]
			out[u.ObsUnitID] = catalog.ExecutedTime{Seconds: x.Seconds + u.Seconds, Completed: x.Completed + u.Executions}
		}
	}
	return out, nil
}

var _ catalog.PendingExecutions = (*Client)(nil)

// Sites is the ingest services of every site, each with its own buffer: obs units are fenced,
// sealed and released at all of them (a start buffered at a secondary site references the obs
// unit as much as one buffered here). Any one that cannot be asked makes the delete fail.
type Sites []*Client

var _ catalog.Executions = Sites(nil)

// NewSites returns the clients of the ingest services at urls (the first is this site's).
func NewSites(secret string, urls ...string) Sites {
	out := make(Sites, 0, len(urls))
	for _, u := range urls {
		if u != "" {
			out = append(out, New(u, secret))
		}
	}
	return out
}

// Fence fences the obs units at every site and returns the buffered executions of all.
func (s Sites) Fence(ctx context.Context, token string, obsUnitIDs []int64) ([]catalog.ExecutionRef, error) {
	var all []catalog.ExecutionRef
	for _, c := range s {
		refs, err := c.Fence(ctx, token, obsUnitIDs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.BaseURL, err)
		}
		all = append(all, refs...)
	}
	return all, nil
}

// Seal seals the delete's fences at every site (the caller releases them all on an error).
func (s Sites) Seal(ctx context.Context, token string, obsUnitIDs []int64) error {
	for _, c := range s {
		if err := c.Seal(ctx, token, obsUnitIDs); err != nil {
			return fmt.Errorf("%s: %w", c.BaseURL, err)
		}
	}
	return nil
}

// Pending sums the pending executions held in every site's buffer; any site that cannot be asked
// makes it fail (the accounting then leaves pending out rather than understate it).
func (s Sites) Pending(ctx context.Context, obsUnitIDs []int64) (map[int64]catalog.ExecutedTime, error) {
	out := map[int64]catalog.ExecutedTime{}
	for _, c := range s {
		p, err := c.Pending(ctx, obsUnitIDs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.BaseURL, err)
		}
		for id, x := range p {
			y := out[id]
			out[id] = catalog.ExecutedTime{Seconds: x.Seconds + y.Seconds, Completed: x.Completed + y.Completed}
		}
	}
	return out, nil
}

var _ catalog.PendingExecutions = Sites(nil)

// Release releases the delete's fences and tombstones at every site it can reach.
func (s Sites) Release(ctx context.Context, token string, obsUnitIDs []int64) error {
	var first error
	for _, c := range s {
		if err := c.Release(ctx, token, obsUnitIDs); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", c.BaseURL, err)
		}
	}
	return first
}
