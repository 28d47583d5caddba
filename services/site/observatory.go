package site

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// ObservatoryPollInterval is how often the main site's Observatory watch asks the observatory's
// /buffer-stats; each try times out after the same interval.
const ObservatoryPollInterval = 2 * time.Second

// observatoryBodyLimit bounds an answer read from the observatory (its /buffer-stats is a few KB).
const observatoryBodyLimit = 1 << 20

// ObservatoryStatus is the observatory (the secondary site) as the main site last saw it across
// the WAN: its /buffer-stats when last reached, and whether it answers now. The URL and the
// error stay in the log (they name addresses).
type ObservatoryStatus struct {
	Reachable        bool         `json:"reachable" doc:"Whether the latest poll was answered with the observatory's statistics."`
	CheckedAt        *time.Time   `json:"checked_at,omitempty" doc:"When the latest poll ended (absent before the first)."`
	LastSeen         *time.Time   `json:"last_seen,omitempty" doc:"When the observatory last answered (absent if it never has since this service started)."`
	UnreachableSince *time.Time   `json:"unreachable_since,omitempty" doc:"While unreachable: the first failed poll after the last answer (or after this service started, if it never answered)."`
	Status           *BufferStats `json:"status,omitempty" doc:"The observatory's /buffer-stats as last answered (kept, and so aging, while it is unreachable)."`
}

// Observatory polls the observatory's /buffer-stats from the main site every
// ObservatoryPollInterval and keeps the last answer, when it came, and since when the observatory
// has not answered — so the main site's operators see the far end of the WAN.
type Observatory struct {
	URL    string
	Client *http.Client
	Log    *slog.Logger

	mu   sync.Mutex
	last ObservatoryStatus
}

// NewObservatory watches the /buffer-stats at url.
func NewObservatory(url string, log *slog.Logger) *Observatory {
	return &Observatory{URL: url, Client: &http.Client{Timeout: ObservatoryPollInterval}, Log: log}
}

// Run polls until ctx ends.
func (o *Observatory) Run(ctx context.Context) {
	t := time.NewTicker(ObservatoryPollInterval)
	defer t.Stop()
	for {
		o.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Latest is the observatory as last polled.
func (o *Observatory) Latest() ObservatoryStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// Poll asks the observatory once and records the outcome.
func (o *Observatory) Poll(ctx context.Context) ObservatoryStatus {
	stats, err := o.fetch(ctx)
	now := time.Now().UTC()
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &o.last
	wasReachable := s.Reachable || s.CheckedAt == nil
	s.CheckedAt = &now
	if err == nil {
		s.Reachable, s.LastSeen, s.UnreachableSince, s.Status = true, &now, nil, stats
		if !wasReachable && o.Log != nil {
			o.Log.Info("the observatory answers again")
		}
		return *s
	}
	if ctx.Err() != nil { // shutting down: not the observatory's doing
		return *s
	}
	if s.Reachable || s.UnreachableSince == nil {
		s.UnreachableSince = &now
		if o.Log != nil {
			o.Log.Warn("the observatory's /buffer-stats does not answer", "url", o.URL, "error", err)
		}
	}
	s.Reachable = false
	return *s
}

func (o *Observatory) fetch(ctx context.Context) (*BufferStats, error) {
	ctx, cancel := context.WithTimeout(ctx, ObservatoryPollInterval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, observatoryBodyLimit))
		return nil, fmt.Errorf("%s answered %s", o.URL, resp.Status)
	}
	var st BufferStats
	if err := json.NewDecoder(io.LimitReader(resp.Body, observatoryBodyLimit)).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w", o.URL, err)
	}
	return &st, nil
}
