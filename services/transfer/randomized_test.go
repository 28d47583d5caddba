package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// moverLedger is the movers' record of what the agent API acknowledged, to compare with the
// database at the end, and of every answer they got.
type moverLedger struct {
	mu        sync.Mutex
	completed map[int64]string // operation id → checksum of the acknowledged (200) complete
	wrong     int              // completes with a wrong checksum or size, each answered 409
	answers   map[string]int   // "action status" → count
	bad       []string         // answers never allowed
}

func (l *moverLedger) answer(action string, status int, allowed ...int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[fmt.Sprintf("%s %d", action, status)]++
	for _, a := range allowed {
		if a == status {
			return true
		}
	}
	l.bad = append(l.bad, fmt.Sprintf("%s answered %d", action, status))
	return false
}

// try sends one request without failing the test from a goroutine: a transport or decoding
// error is status 0, which no action allows.
func try(method, url, bearer string, body any, out any) int {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	if out != nil && resp.StatusCode == http.StatusOK && json.Unmarshal(raw, out) != nil {
		return 0
	}
	return resp.StatusCode
}

// TestMoversRandomized is issue 23's randomized test on the movers' side: several movers claim
// through the gateway's agent API and, at random, complete honestly, complete with a wrong
// checksum or a wrong size (refused 409, recorded as checksum_mismatch, never COMPLETED), fail an
// attempt, or complete an operation twice (409), while an admin resets what went FAILED. After
// an honest drain every package is ARCHIVED with verified copies, every acknowledged complete is
// COMPLETED with the checksum it reported (the registered one), every refused complete left a
// checksum_mismatch failure, and the invariant checker finds nothing. OPS_INTEGRITY_SECONDS sets
// the load's length (15 s).
func TestMoversRandomized(t *testing.T) {
	length := 15 * time.Second
	if v := os.Getenv("OPS_INTEGRITY_SECONDS"); v != "" {
		var sec int
		_, err := fmt.Sscan(v, &sec)
		require.NoError(t, err, "OPS_INTEGRITY_SECONDS")
		length = time.Duration(sec) * time.Second
	}
	s := startStack(t, map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0"}) // integrity, not budgets: movers poll freely
	gw := s.GatewayURL
	const packages = 48
	transfertest.AddPackages(t, s.Kit.DB, packages, 1000, "complete") // DTPs of 3 packages
	all := []string{"raw_data_package", "data_transfer_package", "transfer", "unpack", "long_term_archive"}
	l := &moverLedger{completed: map[int64]string{}, answers: map[string]int{}}

	// mover is one agent's loop until ctx ends; honest makes every report the registered one.
	mover := func(ctx context.Context, agent string, rng *rand.Rand, honest bool) {
		for ctx.Err() == nil {
			var claimed struct{ Items []transfer.Operation }
			if st := try("POST", gw+"/api/transfer/agent/claim", s.Mover, map[string]any{"kinds": all, "max": 3, "agent": agent}, &claimed); !l.answer("claim", st, 200) {
				return
			}
			if len(claimed.Items) == 0 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for _, o := range claimed.Items {
				size, sum, err := transfertest.Registered(ctx, s.Kit.DB, o)
				if err != nil {
					l.answer("registration of "+string(o.Kind), 0)
					continue
				}
				body := map[string]any{"agent": agent, "bytes": size, "checksum": sum}
				if o.Kind == transfer.KindLongTermArchive && o.Destination != nil {
					body["physical_copies"] = []map[string]string{{"location": *o.Destination, "path": fmt.Sprintf("rdp/%d.tar", o.ID)}}
				}
				url := fmt.Sprintf("%s/api/transfer/agent/operations/%d/", gw, o.ID)
				verified := transfer.VerifiedAgainst(o.Kind) != ""
				switch k := rng.IntN(100); {
				case !honest && verified && k < 15: // a copy that differs from the registration
					body["checksum"] = transfertest.WrongChecksum
					if l.answer("complete-wrong-checksum", try("POST", url+"complete", s.Mover, body, nil), 409) {
						l.mu.Lock()
						l.wrong++
						l.mu.Unlock()
					}
				case !honest && verified && k < 20: // the right checksum, the wrong size
					body["bytes"] = size + 1
					if l.answer("complete-wrong-size", try("POST", url+"complete", s.Mover, body, nil), 409) {
						l.mu.Lock()
						l.wrong++
						l.mu.Unlock()
					}
				case !honest && k < 25: // a failed attempt, retried by the policy
					l.answer("fail", try("POST", url+"fail", s.Mover, map[string]any{"agent": agent, "error_type": "network",
						"message": "link reset", "retryable": true}, nil), 200)
				default:
					if l.answer("complete", try("POST", url+"complete", s.Mover, body, nil), 200) {
						l.mu.Lock()
						l.completed[o.ID] = sum
						l.mu.Unlock()
						if !honest && k%10 == 0 { // a retried answer: the second is a conflict
							l.answer("complete-again", try("POST", url+"complete", s.Mover, body, nil), 409)
						}
					}
				}
			}
		}
	}
	// resetter is an admin resetting every FAILED operation (the operation may have changed in
	// between: 409).
	resetter := func(ctx context.Context) {
		for ctx.Err() == nil {
			var failed page[op]
			if st := try("GET", gw+"/api/transfer/operations?status=FAILED&limit=100", s.AdminJWT, nil, &failed); !l.answer("list-failed", st, 200) {
				return
			}
			for _, f := range failed.Items {
				l.answer("reset", try("POST", fmt.Sprintf("%s/api/transfer/operation/%s/%d/reset", gw, f.Kind, f.ID), s.AdminJWT, nil, nil), 200, 409)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}

	ctx, stop := context.WithTimeout(context.Background(), length)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mover(ctx, fmt.Sprintf("m%d", i), rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), false)
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); resetter(ctx) }()
	wg.Wait()
	stop()

	// The drain: one honest mover (and the resetter) until every package is ARCHIVED and every
	// DTP UNPACKED. Leases of the random movers end with their reports, so none is left hanging.
	drain, stopDrain := context.WithCancel(context.Background())
	defer stopDrain()
	wg.Add(2)
	go func() { defer wg.Done(); mover(drain, "honest", rand.New(rand.NewPCG(99, 99)), true) }()
	go func() { defer wg.Done(); resetter(drain) }()
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, s.Kit.DB.Get(&pending, `SELECT count(*) FROM operations WHERE status <> 'COMPLETED'`))
		return stateList(t, s, "ARCHIVED").Total == packages && pending == 0
	}, 120*time.Second, 250*time.Millisecond, "the pipeline did not finish")
	stopDrain()
	wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	answers := make([]string, 0, len(l.answers))
	for k, n := range l.answers {
		answers = append(answers, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(answers)
	t.Logf("acknowledged: %d completes, %d refused copies; answers: %v", len(l.completed), l.wrong, answers)
	require.Empty(t, l.bad, "answers never allowed")

	var stored []struct {
		ID       int64   `db:"id"`
		Status   string  `db:"status"`
		Checksum *string `db:"checksum"`
	}
	require.NoError(t, s.Kit.DB.Select(&stored, `SELECT id, status, checksum FROM operations`))
	var wrongRows []string
	for _, o := range stored {
		if sum, ok := l.completed[o.ID]; ok && (o.Status != "COMPLETED" || o.Checksum == nil || *o.Checksum != sum) {
			wrongRows = append(wrongRows, fmt.Sprintf("operation %d: %s %v, acknowledged complete with %s", o.ID, o.Status, o.Checksum, sum))
		}
		if o.Checksum != nil && *o.Checksum == transfertest.WrongChecksum {
			wrongRows = append(wrongRows, fmt.Sprintf("operation %d stored the refused checksum", o.ID))
		}
	}
	require.Empty(t, wrongRows, "acknowledged completes stored otherwise")
	var mismatches int
	require.NoError(t, s.Kit.DB.Get(&mismatches, `SELECT count(*) FROM operation_failures WHERE error_type = $1`, transfer.ErrorTypeChecksumMismatch))
	require.Equal(t, l.wrong, mismatches, "every refused copy left one checksum_mismatch failure")
	var unverified int
	require.NoError(t, s.Kit.DB.Get(&unverified, `SELECT count(*) FROM raw_data_packages p WHERE NOT EXISTS (
		SELECT 1 FROM physical_copies c WHERE c.raw_data_package_id = p.id AND c.checksum = p.checksum AND c.verified_at IS NOT NULL)`))
	require.Zero(t, unverified, "every ARCHIVED package has a verified copy with its checksum")
	require.Greater(t, len(l.completed), 40, "the load made too few completes to tell")
	require.Greater(t, l.wrong, 3, "the load made too few wrong copies to tell")
	testenv.RequireInvariants(t, s.DatabaseURL)
}
