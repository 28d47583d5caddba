package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

// unknownKeys is a JSON object of n properties no schema knows: huma reports each as an
// "unexpected property" carrying the whole decoded body as its value.
func unknownKeys(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%06d":0`, i)
	}
	b.WriteByte('}')
	return b.String()
}

// TestErrorBodiesStayBounded sends, through the gateway, the two bodies that once made a 767 MB
// answer in 7.6 s (4,000 unknown keys, 39 KB) and made authtoken and transfer grow to 16 GB until
// the kernel killed them (60,000 keys, 530 KB) to a JSON route of every service that takes a body:
// each answers 422 in well under a second with a few kilobytes listing problem.MaxErrors inputs
// and counting the rest, and its peak memory stays flat.
func TestErrorBodiesStayBounded(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	user := s.JWT(t, "bounded-user", "admin") // packages are an instrument's or an admin's (issue 24)
	// service -> a JSON route its callers may reach with that JWT. huma validates the first three
	// and reports every unknown key; ingest decodes its bodies itself and stops at the first.
	routes := map[string]string{
		"authtoken": "/api/tokens/",
		"catalog":   "/sources/",
		"transfer":  "/api/transfer/staging",
		"ingest":    "/raw_data_package/",
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for service, path := range routes {
		reportsAll := service != "ingest"
		t.Run(service, func(t *testing.T) {
			before := s.Procs[service].PeakRSS(t)
			for _, n := range []int{4000, 60000} {
				start := time.Now()
				resp := testenv.Call(t, client, http.MethodPost, s.GatewayURL+path, user, unknownKeys(n))
				took := time.Since(start)
				require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%d keys: %s", n, firstBytes(resp.Body))
				require.Less(t, took, time.Second, "%d keys answered in %s", n, took)
				require.Less(t, len(resp.Body), 16<<10, "%d keys: the answer is %d bytes", n, len(resp.Body))
				var p problem.Problem
				resp.JSON(t, &p)
				require.NotEmpty(t, p.Errors, "%d keys", n)
				require.LessOrEqual(t, len(p.Errors), problem.MaxErrors, "%d keys", n)
				if reportsAll {
					require.GreaterOrEqual(t, p.ErrorsOmitted, n-problem.MaxErrors, "%d keys: the rest are counted", n)
					require.Contains(t, p.Detail, "more not listed")
				}
			}
			grew := s.Procs[service].PeakRSS(t) - before
			require.Less(t, grew, int64(100<<20), "%s's peak memory grew by %d MB", service, grew>>20)
		})
	}
}

// firstBytes is the start of a body, for failure messages.
func firstBytes(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
