package precalc

// The records of the heatmap cache and the job store, and their keys.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/obsops/obsops/services/catalog/visibility"
)

// Source is a catalog source with what the engine needs.
type Source struct {
	ID     int64
	Name   string
	Source visibility.Source
}

// ConstraintsKey is the cache key of a source's heatmap under the site's settings: SHA-256 of
// both fingerprints, so moving the source or changing the site makes the old entry a miss.
func ConstraintsKey(site *visibility.Site, src *visibility.Source) string {
	h := sha256.Sum256([]byte("v1|" + site.Fingerprint() + "|" + src.Kind + "|" + src.Fingerprint()))
	return hex.EncodeToString(h[:])
}

// Entry is one computed heatmap row to cache.
type Entry struct {
	SourceID int64
	Key      string
	Hours    []float64
}

// Job is a precalculation job.
type Job struct {
	ID           int64     `db:"id" json:"job_id"`
	Status       string    `db:"status" json:"status" enum:"queued,running,completed,failed"`
	Year         int       `db:"year" json:"year"`
	SourcesDone  int       `db:"sources_done" json:"sources_done"`
	SourcesTotal int       `db:"sources_total" json:"sources_total"`
	Error        *string   `db:"error" json:"error"`
	CreatedAt    time.Time `db:"created_at" json:"created_at"`
	UpdatedAt    time.Time `db:"updated_at" json:"updated_at"`
}

// Job statuses.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobCompleted = "completed"
	JobFailed    = "failed"
)

// JobKey is the idempotency key of a precalculation: the year, the source set and the site.
func JobKey(site *visibility.Site, year int, ids []int64) string {
	sorted := append([]int64(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var b strings.Builder
	fmt.Fprintf(&b, "v1|%d|%s|", year, site.Fingerprint())
	for _, id := range sorted {
		fmt.Fprintf(&b, "%d,", id)
	}
	h := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(h[:])
}
