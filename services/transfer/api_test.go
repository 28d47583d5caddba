package transfer_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/internal/transfertest"
)

type op struct {
	ID                        int64   `json:"id"`
	Kind                      string  `json:"kind"`
	Status                    string  `json:"status"`
	RetryCount                int     `json:"retry_count"`
	RawDataPackageID          *string `json:"raw_data_package_id"`
	DataTransferPackageID     *int64  `json:"data_transfer_package_id"`
	DataTransferID            *int64  `json:"data_transfer_id"`
	LongTermArchiveTransferID *int64  `json:"long_term_archive_transfer_id"`
	Destination               *string `json:"destination_location"`
	LastError                 *string `json:"last_error"`
	LeaseHolder               *string `json:"lease_holder"`
}

type page[T any] struct {
	Items  []T `json:"items"`
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

type rawPackage struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Chain []struct {
		Kind   string `json:"kind"`
		Status string `json:"status"`
	} `json:"chain"`
}

func claim(t *testing.T, base, token string, body map[string]any) []op {
	t.Helper()
	r := call(t, "POST", base+"/api/transfer/agent/claim", token, body)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var out struct{ Items []op }
	r.JSON(t, &out)
	return out.Items
}

// dtpState is the state of the only data transfer package there is ("" while there is none).
func dtpState(t *testing.T, gw, token string) string {
	t.Helper()
	var dtps page[struct {
		State string `json:"state"`
	}]
	r := call(t, "GET", gw+"/api/transfer/transfer-packages", token, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &dtps)
	if len(dtps.Items) == 0 {
		return ""
	}
	return dtps.Items[0].State
}

// The planner's whole chain from finalized packages to ARCHIVED, driven by a mover through the
// agent API behind the gateway, then staging on request.
func TestPipelineThroughAgentAPI(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_STAGING_MAX_PACKAGES": "2", "OPS_STAGING_MAX_OPEN_JOBS": "1"})
	gw := s.GatewayURL
	pkgs := transfertest.AddPackages(t, s.Kit.DB, 3, 1000, "complete")
	all := []string{"raw_data_package", "data_transfer_package", "transfer", "unpack", "long_term_archive"}

	// Only service-account tokens with write:data may claim.
	r := call(t, "POST", gw+"/api/transfer/agent/claim", s.AdminJWT, map[string]any{"kinds": all})
	require.Equal(t, 403, r.Status)
	weak := s.Admin(t, "create-service-token", "--account", "weak", "--scopes", "read:data", "--name", "w", "--days", "1")
	r = call(t, "POST", gw+"/api/transfer/agent/claim", weak, map[string]any{"kinds": all})
	require.Equal(t, 403, r.Status)
	r = call(t, "POST", gw+"/api/transfer/agent/claim", s.Mover, map[string]any{"kinds": []string{"teleport"}})
	require.Equal(t, 422, r.Status)
	r = call(t, "POST", gw+"/api/transfer/agent/claim", s.Mover, map[string]any{"kinds": all, "site": "mars"})
	require.Equal(t, 422, r.Status)
	require.Equal(t, "body.site", problemOf(t, r).Errors[0].Location)

	seenLegacy := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "packages not archived in time")
		var list page[rawPackage]
		r := call(t, "GET", gw+"/api/transfer/raw-packages?state=ARCHIVED", s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &list)
		// A package is ARCHIVED by its first archive copy, which may come before the planner
		// has advanced the DTP's last unpack: the chain is done once the DTP is UNPACKED too.
		if list.Total == 3 && dtpState(t, gw, s.Viewer) == "UNPACKED" {
			break
		}
		ops := claim(t, gw, s.Mover, map[string]any{"kinds": all, "max": 10, "agent": "host1"})
		if len(ops) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, o := range ops {
			require.Equal(t, "IN_PROGRESS", o.Status)
			require.Equal(t, "mover/host1", *o.LeaseHolder)
			switch o.Kind {
			case "raw_data_package", "long_term_archive":
				require.NotNil(t, o.RawDataPackageID)
			default:
				require.NotNil(t, o.DataTransferPackageID)
			}
			if o.Kind == "transfer" || o.Kind == "unpack" {
				require.NotNil(t, o.DataTransferID, "%s carries its legacy data_transfer id", o.Kind)
				seenLegacy[o.Kind] = true
			}
			if o.Kind == "long_term_archive" {
				require.NotNil(t, o.LongTermArchiveTransferID)
				seenLegacy[o.Kind] = true
			}
			r := call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/heartbeat", gw, o.ID), s.Mover, map[string]any{"agent": "host1"})
			require.Equal(t, 200, r.Status, "%s", r.Body)
			full, err := s.Kit.Store.Operation(t.Context(), "", o.ID)
			require.NoError(t, err)
			size, sum := transfertest.Report(t, s.Kit.DB, full)
			body := map[string]any{"agent": "host1", "bytes": size, "checksum": sum}
			if o.Kind == "long_term_archive" {
				body["physical_copies"] = []map[string]string{{"location": *o.Destination, "path": "rdp/" + *o.RawDataPackageID + ".tar"}}
			}
			r = call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/complete", gw, o.ID), s.Mover, body)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			var done op
			r.JSON(t, &done)
			require.Equal(t, "COMPLETED", done.Status)
			// Completing twice is a conflict naming the status.
			r = call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/complete", gw, o.ID), s.Mover, body)
			require.Equal(t, 409, r.Status)
			require.Contains(t, problemOf(t, r).Detail, "COMPLETED")
		}
	}
	require.True(t, seenLegacy["transfer"] && seenLegacy["unpack"] && seenLegacy["long_term_archive"])

	var list page[rawPackage]
	call(t, "GET", gw+"/api/transfer/raw-packages", s.Viewer, nil).JSON(t, &list)
	require.Equal(t, 3, list.Total)
	for _, p := range list.Items {
		require.Equal(t, "ARCHIVED", p.State)
		require.GreaterOrEqual(t, len(p.Chain), 6, "raw_data_package, data_transfer_package, 2 transfers, 2 unpacks, archives")
	}
	var dtps page[struct {
		State string `json:"state"`
		Chain []any  `json:"chain"`
	}]
	r = call(t, "GET", gw+"/api/transfer/transfer-packages", s.Viewer, nil)
	t.Logf("%s", r.Body)
	r.JSON(t, &dtps)
	require.Equal(t, 1, dtps.Total)
	require.Equal(t, "UNPACKED", dtps.Items[0].State)
	require.Len(t, dtps.Items[0].Chain, 5)

	var ov transfer.Overview
	r = call(t, "GET", gw+"/api/transfer/overview", "", nil)
	require.Equal(t, 200, r.Status)
	r.JSON(t, &ov)
	require.Equal(t, int64(3), ov.Funnel.PackagesArchived)
	require.Equal(t, int64(3), ov.Funnel.PackagesRegistered)
	require.Equal(t, int64(1), ov.Funnel.DTPsUnpacked)
	require.Equal(t, int64(1), ov.Funnel.DTPsBuilt)
	require.Equal(t, int64(2), ov.Operations[transfer.KindTransfer][transfer.StatusCompleted])

	// Staging on request (any user), moved by a mover.
	r = call(t, "POST", gw+"/api/transfer/staging", s.Viewer, map[string]any{"raw_data_package_ids": []string{pkgs[0].String(), uuid.NewString()}})
	require.Equal(t, 422, r.Status)
	require.Equal(t, "body.raw_data_package_ids[1]", problemOf(t, r).Errors[0].Location)
	r = call(t, "POST", gw+"/api/transfer/staging", s.Viewer, map[string]any{"raw_data_package_ids": []string{pkgs[0].String()}})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var job struct {
		ID         int64 `json:"id"`
		Operations []struct {
			ID int64 `json:"id"`
		} `json:"operations"`
	}
	r.JSON(t, &job)
	require.NotZero(t, job.ID)
	require.Len(t, job.Operations, 1)
	require.Equal(t, fmt.Sprintf("/api/transfer/staging/%d", job.ID), r.Header.Get("Location"), "the created job")
	r = call(t, "GET", gw+r.Header.Get("Location"), s.Viewer, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var read struct {
		ID          int64  `json:"id"`
		Destination string `json:"destination_location"`
		Operations  []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"operations"`
	}
	r.JSON(t, &read)
	require.Equal(t, job.ID, read.ID)
	require.NotEmpty(t, read.Destination)
	require.Len(t, read.Operations, 1)
	require.Equal(t, job.Operations[0].ID, read.Operations[0].ID)
	require.Equal(t, "PENDING", read.Operations[0].Status)
	require.Equal(t, 404, call(t, "GET", fmt.Sprintf("%s/api/transfer/staging/%d", gw, job.ID+1000), s.Viewer, nil).Status)
	// A staging job is its requester's: another user reads it as unknown and does not list it;
	// an admin sees every job. One user's open jobs and a job's packages are bounded.
	carol := s.JWT(t, "carol", "viewer")
	require.Equal(t, 404, call(t, "GET", gw+r.Header.Get("Location"), carol, nil).Status, "another user's staging job")
	require.Equal(t, 200, call(t, "GET", fmt.Sprintf("%s/api/transfer/staging/%d", gw, job.ID), s.AdminJWT, nil).Status)
	var jobs struct {
		Total int `json:"total"`
		Items []struct {
			ID          int64          `json:"id"`
			RequestedBy string         `json:"requested_by"`
			Open        bool           `json:"open"`
			Operations  map[string]int `json:"operations"`
		} `json:"items"`
	}
	call(t, "GET", gw+"/api/transfer/staging", s.Viewer, nil).JSON(t, &jobs)
	require.Equal(t, 1, jobs.Total)
	require.Equal(t, job.ID, jobs.Items[0].ID)
	require.True(t, jobs.Items[0].Open)
	require.Equal(t, map[string]int{"PENDING": 1}, jobs.Items[0].Operations)
	call(t, "GET", gw+"/api/transfer/staging", carol, nil).JSON(t, &jobs)
	require.Zero(t, jobs.Total, "carol has no staging jobs")
	call(t, "GET", gw+"/api/transfer/staging", s.AdminJWT, nil).JSON(t, &jobs)
	require.Equal(t, 1, jobs.Total, "an admin lists everyone's")
	r = call(t, "POST", gw+"/api/transfer/staging", s.Viewer, map[string]any{"raw_data_package_ids": []string{pkgs[1].String()}})
	require.Equal(t, 429, r.Status, "bob has OPS_STAGING_MAX_OPEN_JOBS (1) open: %s", r.Body)
	require.Contains(t, string(r.Body), "OPS_STAGING_MAX_OPEN_JOBS")
	r = call(t, "POST", gw+"/api/transfer/staging", carol, map[string]any{"raw_data_package_ids": []string{pkgs[0].String(), pkgs[1].String(), pkgs[2].String()}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	require.Equal(t, "body.raw_data_package_ids", problemOf(t, r).Errors[0].Location)
	require.Equal(t, 401, call(t, "GET", gw+fmt.Sprintf("/api/transfer/staging/%d", job.ID), "", nil).Status)
	ops := claim(t, gw, s.Mover, map[string]any{"kinds": []string{"staging"}, "site": "cologne"})
	require.Len(t, ops, 1)
	r = call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/complete", gw, ops[0].ID), s.Mover, map[string]any{"bytes": 1000, "checksum": transfertest.PackageChecksum})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	call(t, "GET", gw+"/api/transfer/overview", "", nil).JSON(t, &ov)
	require.Equal(t, int64(1), ov.Funnel.Staged)
}

// failOp claims the operation id's kind until it gets id, then fails it (non-retryable).
func failOp(t *testing.T, s *stack, kind string, id int64) {
	t.Helper()
	_, err := s.Kit.DB.Exec(`UPDATE operations SET status = 'IN_PROGRESS', lease_holder = 'mover', lease_expires_at = now() + interval '1 minute' WHERE id = $1`, id)
	require.NoError(t, err)
	r := call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/fail", s.GatewayURL, id), s.Mover,
		map[string]any{"error_type": "checksum_mismatch", "message": "tar differs", "retryable": false, "log_path": "/var/log/mover/1.log"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
}

func opID(t *testing.T, s *stack, q string, args ...any) int64 {
	t.Helper()
	var id int64
	require.NoError(t, s.Kit.DB.Get(&id, q, args...))
	return id
}

// Resets: 409 naming the status, 404, 422, dry_run, retry_count, history with who and why;
// reset-all-failed; failure history; the legacy shims leave the legacy rows' own columns alone;
// every admin route refuses non-admins; list pagination limits.
func TestResetsHistoryShimsAccessAndPagination(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_PLANNER_INTERVAL": "1h"}) // the test drives the planner itself
	gw := s.GatewayURL
	e := s.Kit
	transfertest.AddPackages(t, e.DB, 3, 1000, "complete")
	e.Round(t)
	rdp := opID(t, s, `SELECT min(id) FROM operations WHERE kind = 'raw_data_package'`)
	failOp(t, s, "raw_data_package", rdp)

	t.Run("single reset", func(t *testing.T) {
		r := call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/teleport/%d/reset", gw, rdp), s.AdminJWT, nil)
		require.Equal(t, 422, r.Status)
		require.Equal(t, "path.kind", problemOf(t, r).Errors[0].Location)
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/transfer/%d/reset", gw, rdp), s.AdminJWT, nil)
		require.Equal(t, 404, r.Status, "(kind, id) names one operation")
		r = call(t, "POST", gw+"/api/transfer/operation/raw_data_package/999999/reset", s.AdminJWT, nil)
		require.Equal(t, 404, r.Status)

		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/raw_data_package/%d/reset?dry_run=true", gw, rdp), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var o op
		r.JSON(t, &o)
		require.Equal(t, "PENDING", o.Status)
		require.Equal(t, 1, o.RetryCount)
		var status string
		require.NoError(t, e.DB.Get(&status, `SELECT status FROM operations WHERE id = $1`, rdp))
		require.Equal(t, "FAILED", status, "dry_run changes nothing")

		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/raw_data_package/%d/reset?reason=%s", gw, rdp, url.QueryEscape("disk replaced")), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &o)
		require.Equal(t, "PENDING", o.Status)
		require.Equal(t, 1, o.RetryCount)
		require.Nil(t, o.LastError, "error cleared")

		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/operation/raw_data_package/%d/reset", gw, rdp), s.AdminJWT, nil)
		require.Equal(t, 409, r.Status)
		require.Contains(t, problemOf(t, r).Detail, "PENDING")

		var hist struct {
			CurrentStatus string `json:"current_status"`
			RetryCount    int    `json:"retry_count"`
			Failures      int    `json:"failures"`
			Events        []struct {
				Event   string  `json:"event"`
				Actor   string  `json:"actor"`
				Reason  *string `json:"reason"`
				LogPath *string `json:"log_path"`
				Message *string `json:"message"`
			} `json:"events"`
		}
		r = call(t, "GET", fmt.Sprintf("%s/api/transfer/failure-history/raw_data_package/%d", gw, rdp), s.Viewer, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &hist)
		require.Equal(t, "PENDING", hist.CurrentStatus)
		require.Equal(t, 1, hist.RetryCount)
		require.Equal(t, 1, hist.Failures)
		var kinds []string
		for _, ev := range hist.Events {
			kinds = append(kinds, ev.Event)
		}
		require.Equal(t, []string{"created", "failed", "reset"}, kinds)
		require.Equal(t, "/var/log/mover/1.log", *hist.Events[1].LogPath)
		require.Equal(t, "tar differs", *hist.Events[1].Message)
		require.Equal(t, "alice", hist.Events[2].Actor)
		require.Equal(t, "disk replaced", *hist.Events[2].Reason)

		r = call(t, "GET", gw+"/api/transfer/failure-history/teleport/1", s.Viewer, nil)
		require.Equal(t, 422, r.Status)
		r = call(t, "GET", gw+"/api/transfer/failure-history/transfer/999999", s.Viewer, nil)
		require.Equal(t, 404, r.Status)
		r = call(t, "GET", gw+"/api/transfer/failure-history/transfer/1", "", nil)
		require.Equal(t, 401, r.Status)
	})

	t.Run("reset-all-failed", func(t *testing.T) {
		var ids []int64
		require.NoError(t, e.DB.Select(&ids, `SELECT id FROM operations WHERE kind = 'raw_data_package' AND status = 'PENDING' ORDER BY id`))
		for _, id := range ids {
			failOp(t, s, "raw_data_package", id)
		}
		var res struct {
			IDs    []int64 `json:"ids"`
			Count  int     `json:"count"`
			DryRun bool    `json:"dry_run"`
		}
		r := call(t, "POST", gw+"/api/transfer/operation/raw_data_package/reset-all-failed?dry_run=true", s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &res)
		require.Equal(t, ids, res.IDs)
		require.Equal(t, 3, res.Count)
		require.True(t, res.DryRun)
		r = call(t, "POST", gw+"/api/transfer/operation/raw_data_package/reset-all-failed?reason=batch", s.AdminJWT, nil)
		r.JSON(t, &res)
		require.Equal(t, ids, res.IDs)
		require.False(t, res.DryRun)
		var retries []int
		require.NoError(t, e.DB.Select(&retries, `SELECT retry_count FROM operations WHERE id = ANY($1) AND status = 'PENDING' ORDER BY id`, pqInts(ids)))
		require.Equal(t, []int{2, 1, 1}, retries)
		r = call(t, "POST", gw+"/api/transfer/operation/raw_data_package/reset-all-failed", s.AdminJWT, nil)
		r.JSON(t, &res)
		require.Equal(t, 0, res.Count)
		require.Equal(t, []int64{}, res.IDs)
		r = call(t, "POST", gw+"/api/transfer/operation/nope/reset-all-failed", s.AdminJWT, nil)
		require.Equal(t, 422, r.Status)
	})

	t.Run("legacy shims reset only the operation rows", func(t *testing.T) {
		e.DriveAll(t, "m", transfer.KindRawDataPackage, transfer.KindDataTransferPackage)
		transferOp := opID(t, s, `SELECT min(id) FROM operations WHERE kind = 'transfer'`)
		failOp(t, s, "transfer", transferOp)
		legacy := opID(t, s, `SELECT id FROM data_transfers WHERE transfer_operation_id = $1`, transferOp)
		type legacyCols struct {
			Status       string    `db:"status"`
			Retry        int       `db:"retry_count"`
			UnpackStatus string    `db:"unpack_status"`
			UnpackRetry  int       `db:"unpack_retry_count"`
			UpdatedAt    time.Time `db:"updated_at"`
		}
		var before, after legacyCols
		require.NoError(t, e.DB.Get(&before, `SELECT status, retry_count, unpack_status, unpack_retry_count, updated_at FROM data_transfers WHERE id = $1`, legacy))
		require.Equal(t, "failed", before.Status, "the legacy row mirrors the mover's outcome")

		r := call(t, "POST", fmt.Sprintf("%s/api/transfer/data-transfer/%d/reset?dry_run=true", gw, legacy), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/data-transfer/%d/reset?reason=retry", gw, legacy), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var res struct {
			ID         int64 `json:"id"`
			Operations []op  `json:"operations"`
		}
		r.JSON(t, &res)
		require.Len(t, res.Operations, 1)
		require.Equal(t, transferOp, res.Operations[0].ID)
		require.Equal(t, "PENDING", res.Operations[0].Status)
		require.NoError(t, e.DB.Get(&after, `SELECT status, retry_count, unpack_status, unpack_retry_count, updated_at FROM data_transfers WHERE id = $1`, legacy))
		require.Equal(t, before, after, "legacy columns untouched")
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/data-transfer/%d/reset", gw, legacy), s.AdminJWT, nil)
		require.Equal(t, 409, r.Status)
		require.Contains(t, problemOf(t, r).Detail, "PENDING")
		r = call(t, "POST", gw+"/api/transfer/data-transfer/999999/reset", s.AdminJWT, nil)
		require.Equal(t, 404, r.Status)

		// Through to the archives; then the long-term-archive shims.
		e.DriveAll(t, "m", transfer.KindTransfer, transfer.KindUnpack)
		var lta []int64
		require.NoError(t, e.DB.Select(&lta, `SELECT id FROM operations WHERE kind = 'long_term_archive' ORDER BY id LIMIT 2`))
		for _, id := range lta {
			failOp(t, s, "long_term_archive", id)
		}
		type ltaCols struct {
			Status    string    `db:"status"`
			Attempts  int       `db:"attempt_count"`
			UpdatedAt time.Time `db:"updated_at"`
		}
		var lb, la []ltaCols
		q := `SELECT status, attempt_count, updated_at FROM long_term_archive_transfers WHERE operation_id = ANY($1) ORDER BY id`
		require.NoError(t, e.DB.Select(&lb, q, pqInts(lta)))
		legacyLTA := opID(t, s, `SELECT id FROM long_term_archive_transfers WHERE operation_id = $1`, lta[0])
		r = call(t, "POST", fmt.Sprintf("%s/api/transfer/long-term-archive/%d/reset", gw, legacyLTA), s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var all struct {
			IDs          []int64 `json:"ids"`
			Count        int     `json:"count"`
			DryRun       bool    `json:"dry_run"`
			OperationIDs []int64 `json:"operation_ids"`
		}
		r = call(t, "POST", gw+"/api/transfer/long-term-archive/reset-all-failed?dry_run=true", s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &all)
		require.Equal(t, 1, all.Count)
		require.Equal(t, []int64{lta[1]}, all.OperationIDs)
		r = call(t, "POST", gw+"/api/transfer/long-term-archive/reset-all-failed", s.AdminJWT, nil)
		r.JSON(t, &all)
		require.Equal(t, 1, all.Count)
		require.False(t, all.DryRun)
		require.NoError(t, e.DB.Select(&la, q, pqInts(lta)))
		require.Equal(t, lb, la, "legacy columns untouched")
		require.Equal(t, 0, countRows(t, s, `SELECT count(*) FROM operations WHERE id = ANY($1) AND status <> 'PENDING'`, pqInts(lta)))

		r = call(t, "POST", gw+"/api/transfer/data-transfer/reset-all-failed", s.AdminJWT, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		r.JSON(t, &all)
		require.Equal(t, 0, all.Count)
	})

	t.Run("every admin route refuses non-admins", func(t *testing.T) {
		n := 0
		for key, rule := range authn.Access() {
			method, path, _ := strings.Cut(key, " ")
			if !strings.HasPrefix(path, "/api/transfer/") || len(rule.JWTRoles) == 0 {
				continue
			}
			n++
			p := strings.NewReplacer("{kind}", "transfer", "{id}", "1").Replace(path)
			if strings.Contains(path, "raw-data-package/{id}") {
				p = strings.Replace(path, "{id}", uuid.NewString(), 1)
			}
			r := call(t, method, gw+p, s.Viewer, nil)
			require.Equal(t, http.StatusForbidden, r.Status, "%s as a viewer: %s", key, r.Body)
			r = call(t, method, gw+p, s.Mover, nil)
			require.Equal(t, http.StatusForbidden, r.Status, "%s with an API token", key)
			r = call(t, method, gw+p, "", nil)
			require.Equal(t, http.StatusUnauthorized, r.Status, key)
			r = call(t, method, gw+p, s.AdminJWT, nil)
			require.NotContains(t, []int{401, 403}, r.Status, "%s as admin: %s", key, r.Body)
		}
		require.Equal(t, 8, n)
	})

	t.Run("pagination", func(t *testing.T) {
		transfertest.AddPackages(t, e.DB, 60, 1, "complete")
		e.Round(t)
		for _, q := range []string{"limit=0", "limit=501", "offset=-1", "state=LOST", "site=mars", "from=yesterday", "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"} {
			r := call(t, "GET", gw+"/api/transfer/raw-packages?"+q, s.Viewer, nil)
			require.Equal(t, 422, r.Status, "%s: %s", q, r.Body)
			require.NotEmpty(t, problemOf(t, r).Errors, q)
		}
		var p page[rawPackage]
		call(t, "GET", gw+"/api/transfer/raw-packages", s.Viewer, nil).JSON(t, &p)
		require.Equal(t, 63, p.Total)
		require.Len(t, p.Items, 50)
		require.Equal(t, 50, p.Limit)
		var rest page[rawPackage]
		call(t, "GET", gw+"/api/transfer/raw-packages?limit=500&offset=50", s.Viewer, nil).JSON(t, &rest)
		require.Len(t, rest.Items, 13)
		var newest string
		require.NoError(t, e.DB.Get(&newest, `SELECT raw_data_package_id::text FROM package_states ORDER BY created_at DESC, raw_data_package_id DESC LIMIT 1`))
		require.Equal(t, newest, p.Items[0].ID, "newest first")
		call(t, "GET", gw+"/api/transfer/raw-packages?state=ARCHIVED", s.Viewer, nil).JSON(t, &p)
		require.Equal(t, 0, p.Total)
		call(t, "GET", gw+"/api/transfer/raw-packages?site=cornell", s.Viewer, nil).JSON(t, &p)
		require.Equal(t, 3, p.Total, "the packages with an operation at cornell")
		call(t, "GET", gw+"/api/transfer/raw-packages?from="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), s.Viewer, nil).JSON(t, &p)
		require.Equal(t, 0, p.Total)
		r := call(t, "GET", gw+"/api/transfer/transfer-packages?limit=501", s.Viewer, nil)
		require.Equal(t, 422, r.Status)
		var d page[any]
		call(t, "GET", gw+"/api/transfer/transfer-packages?site=cornell&state=UNPACKED", s.Viewer, nil).JSON(t, &d)
		require.Equal(t, 1, d.Total)
		r = call(t, "GET", gw+"/api/transfer/raw-packages", "", nil)
		require.Equal(t, 401, r.Status)
	})
}

func countRows(t *testing.T, s *stack, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.Kit.DB.Get(&n, q, args...))
	return n
}

// A mover's complete wakes the planner at once (through Redis): with its poll an hour apart,
// the completed package still becomes a DTP within seconds.
func TestCompleteWakesThePlanner(t *testing.T) {
	s := startStack(t, map[string]string{"OPS_PLANNER_INTERVAL": "1h"})
	transfertest.AddPackages(t, s.Kit.DB, 1, 3000, "complete") // the 3000-byte DTP target
	s.Kit.Round(t)                                             // entered by the test's planner round
	ops := claim(t, s.GatewayURL, s.Mover, map[string]any{"kinds": []string{"raw_data_package"}})
	require.Len(t, ops, 1)
	r := call(t, "POST", fmt.Sprintf("%s/api/transfer/agent/operations/%d/complete", s.GatewayURL, ops[0].ID), s.Mover, map[string]any{"bytes": 3000, "checksum": transfertest.PackageChecksum})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, s.Kit.DB.Get(&n, `SELECT count(*) FROM data_transfer_packages`))
		return n == 1
	}, 5*time.Second, 50*time.Millisecond, "the woken planner grouped the package")
}
