package transfer_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

// operationDetail is GET /operation/{kind}/{id} as the tests read it.
type operationDetail struct {
	op
	Failures int `json:"failures"`
	History  []struct {
		Event     string  `json:"event"`
		To        string  `json:"to"`
		ErrorType *string `json:"error_type"`
		Message   *string `json:"message"`
	} `json:"history"`
}

// packageDetail is GET /raw-packages/{id} as the tests read it.
type packageDetail struct {
	rawPackage
	Checksum string `json:"checksum"`
	Copies   []struct {
		Site       string  `json:"site"`
		Location   string  `json:"location"`
		Path       string  `json:"path"`
		Checksum   string  `json:"checksum"`
		SizeBytes  int64   `json:"size_bytes"`
		VerifiedAt *string `json:"verified_at"`
	} `json:"physical_copies"`
}

// leaseTo puts operation id IN_PROGRESS, leased to the mover token's holder "mover/a".
func leaseTo(t *testing.T, s *stack, id int64) {
	t.Helper()
	_, err := s.Kit.DB.Exec(`UPDATE operations SET status = 'IN_PROGRESS', lease_holder = 'mover/a', lease_expires_at = now() + interval '1 minute', attempt = attempt + 1 WHERE id = $1`, id)
	require.NoError(t, err)
}

func completeOp(t *testing.T, s *stack, id int64, body map[string]any) response {
	t.Helper()
	body["agent"] = "a"
	return call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/complete", s.GatewayURL, id), s.Mover, body)
}

func stateList(t *testing.T, s *stack, state string) page[rawPackage] {
	t.Helper()
	var list page[rawPackage]
	r := call(t, "GET", s.GatewayURL+"/api/transfer/raw-packages?state="+state, s.Viewer, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &list)
	return list
}

// Issue 23, rules 6, 7 and 8 through the gateway: a completion needs the checksum; a transfer
// or archive copy that does not match the registration fails the operation with
// checksum_mismatch in its history (409, retried, never COMPLETED); a FAILED transfer makes
// every package of its DTP FAILED (listed by state=FAILED) until it is reset; one verified
// archive copy of two does not make a package ARCHIVED, both do; the package, its chain and
// copies, the operation with its history and the list of operations are readable with a JWT.
func TestVerifiedCopiesReplicationAndFailedChains(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_PLANNER_INTERVAL": "1h"}) // the test drives the planner
	gw, e := s.GatewayURL, s.Kit
	pkgs := transfertest.AddPackages(t, e.DB, 3, 1000, "complete") // one DTP of 3,000 bytes
	e.Round(t)
	e.DriveAll(t, "m", transfer.KindRawDataPackage, transfer.KindDataTransferPackage)
	var dtpSum string
	require.NoError(t, e.DB.Get(&dtpSum, `SELECT checksum FROM data_transfer_packages`))
	require.Equal(t, transfertest.DTPChecksum, dtpSum, "the DTP's build registered its checksum")
	transferAt := func(loc string) int64 {
		return opID(t, s, `SELECT o.id FROM operations o JOIN data_locations l ON l.id = o.destination_location_id WHERE o.kind = 'transfer' AND l.name = $1`, loc)
	}
	cornell := transferAt("cornell-archive")

	t.Run("the checksum is required and must be one", func(t *testing.T) {
		leaseTo(t, s, cornell)
		r := completeOp(t, s, cornell, map[string]any{"bytes": 100})
		require.Equal(t, 422, r.Status, "%s", r.Body)
		require.Equal(t, "body.checksum", problemOf(t, r).Errors[0].Location)
		r = completeOp(t, s, cornell, map[string]any{"bytes": 100, "checksum": ""})
		require.Equal(t, 422, r.Status, "%s", r.Body)
		require.Equal(t, "body.checksum", problemOf(t, r).Errors[0].Location)
		r = completeOp(t, s, cornell, map[string]any{"bytes": 100, "checksum": "sha256:ab"})
		require.Equal(t, 422, r.Status, "%s", r.Body)
		require.Equal(t, "body.checksum", problemOf(t, r).Errors[0].Location)
		r = completeOp(t, s, cornell, map[string]any{"checksum": transfertest.DTPChecksum})
		require.Equal(t, 422, r.Status, "%s", r.Body)
		require.Equal(t, "body.bytes", problemOf(t, r).Errors[0].Location)
		require.Equal(t, "IN_PROGRESS", opStatusOf(t, s, cornell), "nothing written")
	})

	t.Run("a transfer that does not match its DTP's registration fails with checksum_mismatch", func(t *testing.T) {
		r := completeOp(t, s, cornell, map[string]any{"bytes": 100, "checksum": transfertest.WrongChecksum})
		require.Equal(t, 409, r.Status, "%s", r.Body)
		p := problemOf(t, r)
		require.Contains(t, p.Detail, "checksum_mismatch")
		require.Contains(t, p.Detail, transfertest.DTPChecksum)
		require.Contains(t, p.Detail, "PENDING", "retried: retries were left")
		var d operationDetail
		r = call(t, "GET", fmt.Sprintf("%s/api/transfer/operation/transfer/%d", gw, cornell), s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &d)
		require.Equal(t, "PENDING", d.Status)
		require.Equal(t, 1, d.RetryCount)
		require.Equal(t, 1, d.Failures)
		last := d.History[len(d.History)-1]
		require.Equal(t, "retry", last.Event)
		require.Equal(t, transfer.ErrorTypeChecksumMismatch, *last.ErrorType)
		require.Contains(t, *last.Message, transfertest.WrongChecksum)
		// The wrong size alone is a mismatch too.
		leaseTo(t, s, cornell)
		r = completeOp(t, s, cornell, map[string]any{"bytes": 99, "checksum": transfertest.DTPChecksum})
		require.Equal(t, 409, r.Status, "%s", r.Body)
		require.Equal(t, "PENDING", opStatusOf(t, s, cornell))
		for _, p := range pkgs {
			require.Equal(t, "TRANSFERRING", e.State(t, p))
		}
	})

	t.Run("a FAILED transfer makes its packages FAILED until reset", func(t *testing.T) {
		failOp(t, s, "transfer", cornell)
		require.Equal(t, 3, stateList(t, s, "FAILED").Total)
		var ops page[op]
		r := call(t, "GET", gw+"/api/transfer/operations?kind=transfer&status=FAILED", s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &ops)
		require.Equal(t, 1, ops.Total)
		require.Equal(t, cornell, ops.Items[0].ID)
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/transfer/%d/reset", gw, cornell), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		require.Zero(t, stateList(t, s, "FAILED").Total)
		require.Equal(t, 3, stateList(t, s, "TRANSFERRING").Total)
	})

	e.DriveAll(t, "m", transfer.KindTransfer, transfer.KindUnpack) // returns once every unpack is advanced
	archiveAt := func(t *testing.T, pkg, loc string) int64 {
		return opID(t, s, `SELECT o.id FROM operations o JOIN data_locations l ON l.id = o.destination_location_id
			WHERE o.kind = 'long_term_archive' AND o.raw_data_package_id = $1 AND l.name = $2`, pkg, loc)
	}
	pkg := pkgs[0].String()
	copyAt := func(loc string) []map[string]string {
		return []map[string]string{{"location": loc, "path": "archive/" + pkg + ".tar"}}
	}

	t.Run("an archive copy that does not match the package's registration is never COMPLETED", func(t *testing.T) {
		id := archiveAt(t, pkg, "cornell-archive")
		leaseTo(t, s, id)
		r := completeOp(t, s, id, map[string]any{"bytes": 1000, "checksum": transfertest.PackageChecksum})
		require.Equal(t, 422, r.Status, "an archive operation reports its copy: %s", r.Body)
		require.Equal(t, "body.physical_copies", problemOf(t, r).Errors[0].Location)
		_, err := s.Kit.DB.Exec(`UPDATE operations SET retry_count = max_retries WHERE id = $1`, id) // its last retry
		require.NoError(t, err)
		r = completeOp(t, s, id, map[string]any{"bytes": 1000, "checksum": transfertest.WrongChecksum, "physical_copies": copyAt("cornell-archive")})
		require.Equal(t, 409, r.Status, "%s", r.Body)
		require.Contains(t, problemOf(t, r).Detail, "FAILED")
		var d operationDetail
		call(t, "GET", fmt.Sprintf("%s/api/transfer/operation/long_term_archive/%d", gw, id), s.Viewer, nil).JSON(t, &d)
		require.Equal(t, "FAILED", d.Status)
		require.Equal(t, transfer.ErrorTypeChecksumMismatch, *d.History[len(d.History)-1].ErrorType)
		require.Equal(t, "FAILED", e.State(t, pkgs[0]), "never ARCHIVED")
		var list page[op]
		call(t, "GET", gw+"/api/transfer/operations?status=FAILED", s.Viewer, nil).JSON(t, &list)
		require.Equal(t, 1, list.Total)
		require.Equal(t, id, list.Items[0].ID)
		require.Zero(t, countRows(t, s, `SELECT count(*) FROM physical_copies WHERE raw_data_package_id = $1`, pkgs[0]), "no copy recorded")
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/long_term_archive/%d/reset", gw, id), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		require.Equal(t, "WAITING", e.State(t, pkgs[0]))
	})

	t.Run("one verified archive copy of two is not ARCHIVED, both are", func(t *testing.T) {
		for i, loc := range []string{"cornell-archive", "cologne-archive"} {
			id := archiveAt(t, pkg, loc)
			leaseTo(t, s, id)
			r := completeOp(t, s, id, map[string]any{"bytes": 1000, "checksum": strings.ToUpper(transfertest.PackageChecksum[:7]) + transfertest.PackageChecksum[7:], "physical_copies": copyAt(loc)})
			require.Equal(t, 200, r.Status, "%s", r.Body)
			var done op
			r.JSON(t, &done)
			require.Equal(t, "COMPLETED", done.Status)
			if i == 0 {
				require.Equal(t, "WAITING", e.State(t, pkgs[0]), "one verified copy of two")
			}
		}
		require.Equal(t, "ARCHIVED", e.State(t, pkgs[0]))
		var d packageDetail
		r := call(t, "GET", gw+"/api/transfer/raw-packages/"+pkg, s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &d)
		require.Equal(t, "ARCHIVED", d.State)
		require.Equal(t, transfertest.PackageChecksum, d.Checksum)
		require.GreaterOrEqual(t, len(d.Chain), 6, "raw_data_package, data_transfer_package, 2 transfers, 2 unpacks, archives")
		verified := map[string]bool{}
		for _, c := range d.Copies {
			if c.VerifiedAt != nil {
				require.Equal(t, int64(1000), c.SizeBytes)
				require.Equal(t, "archive/"+pkg+".tar", c.Path)
				verified[c.Site+"/"+c.Location] = true
			}
		}
		require.Equal(t, map[string]bool{"cornell/cornell-archive": true, "cologne/cologne-archive": true}, verified)
	})

	t.Run("reads: 404s, 422s, 401, pagination", func(t *testing.T) {
		require.Equal(t, 404, call(t, "GET", gw+"/api/transfer/raw-packages/"+"0192f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", s.Viewer, nil).Status)
		require.Equal(t, 422, call(t, "GET", gw+"/api/transfer/raw-packages/not-a-uuid", s.Viewer, nil).Status)
		require.Equal(t, 401, call(t, "GET", gw+"/api/transfer/raw-packages/"+pkg, "", nil).Status)
		require.Equal(t, 404, call(t, "GET", fmt.Sprintf("%s/api/transfer/operation/unpack/%d", gw, cornell), s.Viewer, nil).Status, "(kind, id) names one operation")
		require.Equal(t, 404, call(t, "GET", gw+"/api/transfer/operation/transfer/999999", s.Viewer, nil).Status)
		r := call(t, "GET", gw+"/api/transfer/operation/teleport/1", s.Viewer, nil)
		require.Equal(t, 422, r.Status)
		require.Equal(t, "path.kind", problemOf(t, r).Errors[0].Location)
		require.Equal(t, 401, call(t, "GET", fmt.Sprintf("%s/api/transfer/operation/transfer/%d", gw, cornell), "", nil).Status)
		for q, field := range map[string]string{"kind=teleport": "query.kind", "status=DONE": "query.status", "limit=501": "query.limit", "offset=-1": "query.offset"} {
			r := call(t, "GET", gw+"/api/transfer/operations?"+q, s.Viewer, nil)
			require.Equal(t, 422, r.Status, q)
			require.Equal(t, field, problemOf(t, r).Errors[0].Location, q)
		}
		require.Equal(t, 401, call(t, "GET", gw+"/api/transfer/operations", "", nil).Status)
		all := countRows(t, s, `SELECT count(*) FROM operations WHERE kind = 'long_term_archive'`)
		var first, second page[op]
		call(t, "GET", gw+"/api/transfer/operations?kind=long_term_archive&limit=2", s.Viewer, nil).JSON(t, &first)
		call(t, "GET", gw+"/api/transfer/operations?kind=long_term_archive&limit=2&offset=2", s.Viewer, nil).JSON(t, &second)
		require.Equal(t, all, first.Total)
		require.Equal(t, 2, first.Limit)
		require.Equal(t, 2, second.Offset)
		require.Len(t, first.Items, 2)
		require.Len(t, second.Items, 2)
		require.Greater(t, first.Items[1].ID, second.Items[0].ID, "newest first, pages in order")
		var def page[op]
		call(t, "GET", gw+"/api/transfer/operations", s.Viewer, nil).JSON(t, &def)
		require.Equal(t, 50, def.Limit)
		require.Equal(t, countRows(t, s, `SELECT count(*) FROM operations`), def.Total)
		// The gateway's API document shows the new routes.
		r = call(t, "GET", gw+"/openapi.json", "", nil)
		require.Equal(t, 200, r.Status)
		for _, path := range []string{`"/api/transfer/raw-packages/{id}"`, `"/api/transfer/operation/{kind}/{id}"`, `"/api/transfer/operations"`} {
			require.Contains(t, string(r.Body), path)
		}
	})
}

// The transfer service's /metrics exports operations by kind and status, packages by state and
// failed attempts by type from the start, at 0, and follows the maintained counters.
func TestMetricsFromTheCounters(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_PLANNER_INTERVAL": "1h"})
	metrics := func() string {
		resp, err := http.Get(s.URLs["transfer"] + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	m := metrics()
	for _, line := range []string{
		`obsops_transfer_operations{kind="transfer",status="FAILED"} 0`,
		`obsops_transfer_operations{kind="long_term_archive",status="FAILED"} 0`,
		`obsops_transfer_packages{state="FAILED"} 0`,
		`obsops_transfer_packages{state="ARCHIVED"} 0`,
		`obsops_transfer_operation_failures_total{error_type="checksum_mismatch"} 0`,
		`obsops_transfer_operation_failures_total{error_type="stalled"} 0`,
		`obsops_transfer_leases_overdue 0`,
		`obsops_transfer_lease_overdue_seconds 0`,
		`obsops_transfer_oldest_unarchived_package_age_seconds 0`,
		`obsops_transfer_metrics_up 1`,
	} {
		require.Contains(t, m, line+"\n")
	}
	transfertest.AddPackages(t, s.Kit.DB, 2, 1000, "complete")
	s.Kit.Round(t)
	id := opID(t, s, `SELECT min(id) FROM operations WHERE kind = 'raw_data_package'`)
	failOp(t, s, "raw_data_package", id) // error_type checksum_mismatch, not retryable
	// A lease past its deadline that no planner expired (this one polls hourly).
	_, err := s.Kit.DB.Exec(`UPDATE operations SET status = 'IN_PROGRESS', lease_holder = 'gone', lease_expires_at = now() - interval '10 minutes'
		WHERE id = (SELECT max(id) FROM operations WHERE kind = 'raw_data_package')`)
	require.NoError(t, err)
	m = metrics()
	for _, line := range []string{
		`obsops_transfer_operations{kind="raw_data_package",status="FAILED"} 1`,
		`obsops_transfer_operations{kind="raw_data_package",status="IN_PROGRESS"} 1`,
		`obsops_transfer_packages{state="FAILED"} 1`,
		`obsops_transfer_operation_failures_total{error_type="checksum_mismatch"} 1`,
		`obsops_transfer_leases_overdue 1`,
	} {
		require.Contains(t, m, line+"\n")
	}
	require.NotContains(t, m, "obsops_transfer_oldest_unarchived_package_age_seconds 0\n", "a package waits")
	require.NotContains(t, m, "obsops_transfer_lease_overdue_seconds 0\n")
}

func opStatusOf(t *testing.T, s *stack, id int64) string {
	t.Helper()
	var st string
	require.NoError(t, s.Kit.DB.Get(&st, `SELECT status FROM operations WHERE id = $1`, id))
	return st
}
