package transfer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	prob "github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
)

// What a failure does to an operation: retry with doubling backoff while retryable and retries
// remain, else FAILED; a stall is recorded as such either way.
func TestNextAfterFailure(t *testing.T) {
	p := transfer.RetryPolicy{Backoff: time.Second, BackoffMax: 3 * time.Second}
	op := transfer.Operation{RetryCount: 1, MaxRetries: 3}
	require.Equal(t, transfer.AfterFailure{Status: transfer.StatusPending, RetryCount: 2, Event: "retry", Wait: 2 * time.Second},
		p.NextAfterFailure(op, transfer.Failure{Retryable: true}))
	op.RetryCount = 2
	require.Equal(t, 3*time.Second, p.NextAfterFailure(op, transfer.Failure{Retryable: true}).Wait, "at most BackoffMax")
	op.RetryCount = 3
	require.Equal(t, transfer.AfterFailure{Status: transfer.StatusFailed, RetryCount: 3, Event: "failed"},
		p.NextAfterFailure(op, transfer.Failure{Retryable: true}), "no retries left")
	op.RetryCount = 0
	require.Equal(t, transfer.AfterFailure{Status: transfer.StatusFailed, RetryCount: 0, Event: "failed"},
		p.NextAfterFailure(op, transfer.Failure{Retryable: false}), "not retryable")
	stalled := transfer.StalledFailure(op)
	require.True(t, stalled.Retryable)
	require.Equal(t, "stalled", p.NextAfterFailure(op, stalled).Event)
}

// Who may report on an operation, and the 409s otherwise.
func TestCheckReportAndReset(t *testing.T) {
	m := "m"
	op := transfer.Operation{ID: 7, Kind: transfer.KindTransfer, Status: transfer.StatusInProgress, LeaseHolder: &m}
	require.NoError(t, transfer.CheckReport(op, "m"))
	var lease *transfer.LeaseConflictError
	require.ErrorAs(t, transfer.CheckReport(op, "other"), &lease)
	require.Equal(t, prob.Conflict, lease.ProblemKind())
	var status *transfer.StatusConflictError
	require.ErrorAs(t, transfer.CheckReset(op), &status, "only FAILED can be reset")
	require.Equal(t, prob.Conflict, status.ProblemKind())

	op.Status = transfer.StatusFailed
	require.ErrorAs(t, transfer.CheckReport(op, "m"), &status)
	require.NoError(t, transfer.CheckReset(op))
	reset := transfer.AfterReset(op)
	require.Equal(t, transfer.StatusPending, reset.Status)
	require.Equal(t, 1, reset.RetryCount)
	require.Nil(t, reset.LeaseHolder)
}

// DTPs are made when the oldest packages add up to the target, the rest once the oldest waited.
func TestGroupingGroups(t *testing.T) {
	now := time.Now()
	ready := []transfer.ReadyPackage{{Op: 1, Size: 2, Ready: now.Add(-time.Hour)}, {Op: 2, Size: 2, Ready: now}, {Op: 3, Size: 1, Ready: now}}
	g := transfer.Grouping{TargetBytes: 4, MaxWait: time.Minute}
	require.Equal(t, [][]transfer.ReadyPackage{ready[:2]}, g.Groups(ready, now), "the last one waits")
	require.Equal(t, [][]transfer.ReadyPackage{ready[:2], ready[2:]}, g.Groups(ready, now.Add(time.Minute)), "until it waited MaxWait")
	require.Empty(t, g.Groups(nil, now))
}

// Each completion kind moves a DTP on from one state to the next.
func TestDTPStateAfter(t *testing.T) {
	from, to, ok := transfer.DTPStateAfter(transfer.KindUnpack)
	require.True(t, ok)
	require.Equal(t, transfer.DTPTransferred, from)
	require.Equal(t, transfer.DTPUnpacked, to)
	_, _, ok = transfer.DTPStateAfter(transfer.KindLongTermArchive)
	require.False(t, ok)
}

func TestCheckCompleteReport(t *testing.T) {
	n := int64(0)
	for _, ok := range []string{"sha256:" + strings.Repeat("0a", 32), "SHA256:" + strings.Repeat("AF", 32), "xxh64:0123456789abcdef", "XXH64:0123456789ABCDEF"} {
		require.NoError(t, transfer.CheckCompleteReport(ok, &n), ok)
	}
	for _, bad := range []string{"", "sha256:ab", "sha256:" + strings.Repeat("0g", 32), "md5:0123456789abcdef0123456789abcdef", "xxh64:0123456789abcdeg", "xxh64:0123456789abcde:", "xxh64:0123456789abcdef0"} {
		var fe *prob.FieldError
		require.ErrorAs(t, transfer.CheckCompleteReport(bad, &n), &fe, bad)
		require.Equal(t, "body.checksum", fe.Location)
	}
	var fe *prob.FieldError
	require.ErrorAs(t, transfer.CheckCompleteReport("xxh64:0123456789abcdef", nil), &fe)
	require.Equal(t, "body.bytes", fe.Location)
}
