// Package postgres stores the transfer service's tables: operations and their history, data
// transfer packages, legacy rows, staging jobs, physical copies, package states and the
// maintained overview counters. Every operation change and the package states it affects are
// written in one transaction.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/transfer"
)

// Store is the transfer service's PostgreSQL store.
type Store struct {
	DB *sqlx.DB
	// Lease is how long a claim or heartbeat leases an operation.
	Lease time.Duration
	// MaxRetries is max_retries of new operations.
	MaxRetries int
	// Retry decides what a failed attempt does to an operation (failLocked applies it).
	Retry transfer.RetryPolicy

	stmtMu sync.Mutex
	stmts  map[string]*sqlx.Stmt // the agent API's statements, prepared once (see prepared)
}

// prepared returns query as a prepared statement, prepared on first use. The agent API's
// statements run thousands of times a second: prepared, each runs in one round trip (Bind,
// Execute) and PostgreSQL may keep its plan, where a one-off parameterized query costs two
// round trips (Parse and Describe first) and a parse and plan every time. database/sql prepares
// the statement again on each pooled connection the first time it runs there.
func (s *Store) prepared(ctx context.Context, query string) (*sqlx.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st, ok := s.stmts[query]; ok {
		return st, nil
	}
	st, err := s.DB.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = map[string]*sqlx.Stmt{}
	}
	s.stmts[query] = st
	return st, nil
}

// opColumns selects an operation as transfer.Operation (alias o, joined as in opFrom). Legacy
// rows point only to operations of their own kind (a data_transfer row to its transfer and unpack
// operations, a long_term_archive_transfer row to its long_term_archive operation; mirrorLegacy
// relies on the same), so their ids are looked up for those kinds only: a claim of 20 other
// operations no longer probes three indexes per operation for nothing.
const opColumns = `o.id, o.kind, o.status, o.retry_count, o.max_retries, o.attempt, o.raw_data_package_id,
	o.data_transfer_package_id,
	CASE o.kind WHEN 'transfer' THEN (SELECT d.id FROM data_transfers d WHERE d.transfer_operation_id = o.id)
	            WHEN 'unpack' THEN (SELECT d.id FROM data_transfers d WHERE d.unpack_operation_id = o.id) END AS data_transfer_id,
	CASE WHEN o.kind = 'long_term_archive' THEN
	     (SELECT l.id FROM long_term_archive_transfers l WHERE l.operation_id = o.id) END AS long_term_archive_transfer_id,
	o.staging_job_id, s.name AS site, src.name AS source_location, dst.name AS destination_location,
	o.source_location_id, o.destination_location_id,
	o.lease_holder, o.lease_expires_at, o.next_attempt_at, o.last_error_type, o.last_error, o.bytes, o.checksum,
	o.created_at, o.updated_at, o.completed_at`

const opFrom = ` FROM operations o JOIN sites s ON s.id = o.site_id
	LEFT JOIN data_locations src ON src.id = o.source_location_id
	LEFT JOIN data_locations dst ON dst.id = o.destination_location_id`

type queryer interface {
	sqlx.QueryerContext
	sqlx.ExecerContext
}

func (s *Store) operations(ctx context.Context, q queryer, ids []int64) ([]transfer.Operation, error) {
	ops := []transfer.Operation{}
	if len(ids) == 0 {
		return ops, nil
	}
	err := sqlx.SelectContext(ctx, q, &ops, `SELECT `+opColumns+opFrom+` WHERE o.id = ANY($1) ORDER BY o.id`, pq.Array(ids))
	return ops, err
}

// Operation returns one operation; kind "" matches any kind.
func (s *Store) Operation(ctx context.Context, kind transfer.Kind, id int64) (transfer.Operation, error) {
	return s.operation(ctx, s.DB, kind, id)
}

func (s *Store) operation(ctx context.Context, q queryer, kind transfer.Kind, id int64) (transfer.Operation, error) {
	var op transfer.Operation
	err := sqlx.GetContext(ctx, q, &op, `SELECT `+opColumns+opFrom+` WHERE o.id = $1 AND ($2 = '' OR o.kind = $2)`, id, string(kind))
	if errors.Is(err, sql.ErrNoRows) {
		return op, notFound(kind, id)
	}
	return op, err
}

// notFound is the error for an unknown operation (kind "": of any kind).
func notFound(kind transfer.Kind, id int64) error {
	if kind == "" {
		return transfer.NotFound("operation", id)
	}
	return transfer.NotFound(string(kind)+" operation", id)
}

// lockOperation locks one operation row for a change and returns its current state.
func (s *Store) lockOperation(ctx context.Context, tx *sqlx.Tx, kind transfer.Kind, id int64) (transfer.Operation, error) {
	var op transfer.Operation
	err := tx.GetContext(ctx, &op, `SELECT `+opColumns+opFrom+` WHERE o.id = $1 AND ($2 = '' OR o.kind = $2) FOR UPDATE OF o`, id, string(kind))
	if errors.Is(err, sql.ErrNoRows) {
		return op, notFound(kind, id)
	}
	return op, err
}

// inTx runs fn in a transaction, again (up to three times) if PostgreSQL aborted it as a
// deadlock victim or serialization failure: fn must only touch the database.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return retry(func() error { return database.InTx(ctx, s.DB, fn) })
}

// retry runs fn again (up to three times in all) while PostgreSQL aborts it as a deadlock victim
// or serialization failure.
func retry(fn func() error) (err error) {
	for range 3 {
		if err = fn(); !retryable(err) {
			return err
		}
	}
	return err
}

func retryable(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && (pqErr.Code == "40P01" || pqErr.Code == "40001")
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// Heartbeat extends holder's lease of operation id: one statement that updates the row only
// while it is IN_PROGRESS and leased to holder and answers it. Only when it updated nothing is
// the operation read again, to say why (not found, not IN_PROGRESS, leased to another).
func (s *Store) Heartbeat(ctx context.Context, id int64, holder string) (transfer.Operation, error) {
	st, err := s.prepared(ctx, `
		WITH o AS (
			UPDATE operations o SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
			 WHERE o.id = $1 AND o.status = 'IN_PROGRESS' AND o.lease_holder = $2
			RETURNING o.*)
		SELECT `+opColumns+` FROM o JOIN sites s ON s.id = o.site_id
		  LEFT JOIN data_locations src ON src.id = o.source_location_id
		  LEFT JOIN data_locations dst ON dst.id = o.destination_location_id`)
	if err != nil {
		return transfer.Operation{}, err
	}
	for range 3 {
		ops := []transfer.Operation{}
		if err := st.SelectContext(ctx, &ops, id, holder, seconds(s.Lease)); err != nil {
			return transfer.Operation{}, err
		}
		if len(ops) == 1 {
			return ops[0], nil
		}
		cur, err := s.Operation(ctx, "", id)
		if err != nil {
			return transfer.Operation{}, err
		}
		if err := transfer.CheckReport(cur, holder); err != nil {
			return transfer.Operation{}, err
		}
		// Leased to holder again between the two statements (expired and claimed anew): again.
	}
	return transfer.Operation{}, errors.New("heartbeat: the operation kept changing; try again")
}

// Fail records holder's failed attempt at operation id; s.Retry decides what it leads to
// (transfer.RetryPolicy.NextAfterFailure).
func (s *Store) Fail(ctx context.Context, id int64, holder string, f transfer.Failure) (transfer.Operation, error) {
	var op transfer.Operation
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		cur, err := s.lockOperation(ctx, tx, "", id)
		if err != nil {
			return err
		}
		if err := transfer.CheckReport(cur, holder); err != nil {
			return err
		}
		if err := s.failLocked(ctx, tx, cur, f, holder); err != nil {
			return err
		}
		op, err = s.operation(ctx, tx, "", id)
		return err
	})
	return op, err
}

// failLocked writes failure f of a locked IN_PROGRESS operation as s.Retry decides it
// (transfer.RetryPolicy.NextAfterFailure): the operation's new status, retry count and next
// attempt, its history entry and failure record, the legacy mirror of a final failure and the
// package states it affects.
func (s *Store) failLocked(ctx context.Context, tx *sqlx.Tx, cur transfer.Operation, f transfer.Failure, actor string) error {
	next := s.Retry.NextAfterFailure(cur, f)
	var historyID int64
	err := tx.GetContext(ctx, &historyID, `
		WITH u AS (
			UPDATE operations SET status = $2, retry_count = $3, next_attempt_at = now() + make_interval(secs => $4),
			       lease_holder = NULL, lease_expires_at = NULL, last_error_type = $5, last_error = $6, updated_at = now()
			 WHERE id = $1 RETURNING id, attempt, retry_count)
		INSERT INTO operation_history (operation_id, event, from_status, to_status, actor, error, attempt, retry_count)
		SELECT id, $7, 'IN_PROGRESS', $2, $8, $5 || ': ' || $6, attempt, retry_count FROM u RETURNING id`,
		cur.ID, string(next.Status), next.RetryCount, seconds(next.Wait), f.ErrorType, f.Message, next.Event, actor)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO operation_failures (operation_id, history_id, attempt, error_type, message, retryable, log_path, reported_by)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8)`,
		cur.ID, historyID, cur.Attempt, f.ErrorType, f.Message, f.Retryable, f.LogPath, actor); err != nil {
		return err
	}
	if next.Status == transfer.StatusFailed {
		if err := mirrorLegacy(ctx, tx, cur, "failed"); err != nil {
			return err
		}
	}
	_, err = refreshForOperation(ctx, tx, cur)
	return err
}

// mirrorLegacy writes a mover's final outcome into the legacy rows of operation op (their own
// status and counter columns; resets never touch them). Only transfer, unpack and
// long_term_archive operations have legacy rows.
func mirrorLegacy(ctx context.Context, tx *sqlx.Tx, op transfer.Operation, status string) error {
	var q string
	switch op.Kind {
	case transfer.KindTransfer:
		q = `UPDATE data_transfers SET status = $2, retry_count = $3, updated_at = now() WHERE transfer_operation_id = $1`
	case transfer.KindUnpack:
		q = `UPDATE data_transfers SET unpack_status = $2, unpack_retry_count = $3, updated_at = now() WHERE unpack_operation_id = $1`
	case transfer.KindLongTermArchive:
		q = `UPDATE long_term_archive_transfers SET status = $2, attempt_count = $3, updated_at = now() WHERE operation_id = $1`
	default:
		return nil
	}
	_, err := tx.ExecContext(ctx, q, op.ID, status, op.Attempt)
	return err
}

// ExpireLeases turns IN_PROGRESS operations whose lease expired into their
// transfer.StalledFailure (retryable: they go back to PENDING while retries remain). It returns
// how many it expired.
func (s *Store) ExpireLeases(ctx context.Context, limit int) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []int64
		if err := tx.SelectContext(ctx, &ids, `
			SELECT id FROM operations WHERE status = 'IN_PROGRESS' AND lease_expires_at < now()
			 ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED`, limit); err != nil {
			return err
		}
		ops, err := s.operations(ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, op := range ops {
			if err := s.failLocked(ctx, tx, op, transfer.StalledFailure(op), "planner"); err != nil {
				return err
			}
		}
		n = len(ops)
		return nil
	})
	return n, err
}

// Reset turns FAILED operation (kind, id) into transfer.AfterReset of it (transfer.CheckReset
// says which can be), with a history entry naming actor and reason. dryRun changes nothing and
// answers what the operation would become.
func (s *Store) Reset(ctx context.Context, kind transfer.Kind, id int64, actor, reason string, dryRun bool) (transfer.Operation, error) {
	var op transfer.Operation
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		cur, err := s.lockOperation(ctx, tx, kind, id)
		if err != nil {
			return err
		}
		if err := transfer.CheckReset(cur); err != nil {
			return err
		}
		if dryRun {
			op = transfer.AfterReset(cur)
			return nil
		}
		if _, err := s.resetIDs(ctx, tx, []int64{id}, actor, reason); err != nil {
			return err
		}
		op, err = s.operation(ctx, tx, "", id)
		return err
	})
	return op, err
}

// resetIDs resets the FAILED operations among ids (locked by the caller) as transfer.AfterReset
// says, in one statement, and refreshes the packages they belong to; it returns the ids it reset.
func (s *Store) resetIDs(ctx context.Context, tx *sqlx.Tx, ids []int64, actor, reason string) ([]int64, error) {
	var done []int64
	if err := tx.SelectContext(ctx, &done, `
		WITH u AS (
			UPDATE operations SET status = 'PENDING', retry_count = retry_count + 1, lease_holder = NULL, lease_expires_at = NULL,
			       last_error = NULL, last_error_type = NULL, next_attempt_at = now(), updated_at = now()
			 WHERE id = ANY($1) AND status = 'FAILED'
			RETURNING id, attempt, retry_count)
		INSERT INTO operation_history (operation_id, event, from_status, to_status, actor, reason, attempt, retry_count)
		SELECT id, 'reset', 'FAILED', 'PENDING', $2, nullif($3, ''), attempt, retry_count FROM u
		RETURNING operation_id`, pq.Array(ids), actor, reason); err != nil {
		return nil, err
	}
	if len(done) == 0 {
		return done, nil
	}
	_, err := refreshForOperations(ctx, tx, done)
	return done, err
}

// ResetAllFailed resets every FAILED operation of kind and returns their ids (the ids it would
// reset, with dryRun).
func (s *Store) ResetAllFailed(ctx context.Context, kind transfer.Kind, actor, reason string, dryRun bool) ([]int64, error) {
	ids := []int64{}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.SelectContext(ctx, &ids, `SELECT id FROM operations WHERE kind = $1 AND status = 'FAILED' ORDER BY id FOR UPDATE`, string(kind)); err != nil {
			return err
		}
		if dryRun || len(ids) == 0 {
			return nil
		}
		var err error
		ids, err = s.resetIDs(ctx, tx, ids, actor, reason)
		return err
	})
	return ids, err
}

// legacyOps returns the operation ids behind a legacy row (locked), or ErrNotFound.
func legacyOps(ctx context.Context, tx *sqlx.Tx, kind transfer.LegacyKind, id int64) ([]int64, error) {
	var ids []int64
	var err error
	if kind == transfer.LegacyDataTransfer {
		var row struct {
			T int64         `db:"transfer_operation_id"`
			U sql.NullInt64 `db:"unpack_operation_id"`
		}
		err = tx.GetContext(ctx, &row, `SELECT transfer_operation_id, unpack_operation_id FROM data_transfers WHERE id = $1`, id)
		ids = append(ids, row.T)
		if row.U.Valid {
			ids = append(ids, row.U.Int64)
		}
	} else {
		var op int64
		err = tx.GetContext(ctx, &op, `SELECT operation_id FROM long_term_archive_transfers WHERE id = $1`, id)
		ids = append(ids, op)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, transfer.NotFound(string(kind)+" row", id)
	}
	if err != nil {
		return nil, err
	}
	_, err = tx.ExecContext(ctx, `SELECT id FROM operations WHERE id = ANY($1) ORDER BY id FOR UPDATE`, pq.Array(ids))
	return ids, err
}

// ResetLegacy resets the FAILED operation rows behind legacy row (kind, id), found by foreign
// key; the legacy row's own columns are left as they are. 409 (StatusConflictError) when none of
// them is FAILED.
func (s *Store) ResetLegacy(ctx context.Context, kind transfer.LegacyKind, id int64, actor, reason string, dryRun bool) (transfer.LegacyReset, error) {
	res := transfer.LegacyReset{ID: id, DryRun: dryRun, Operations: []transfer.Operation{}}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		ids, err := legacyOps(ctx, tx, kind, id)
		if err != nil {
			return err
		}
		ops, err := s.operations(ctx, tx, ids)
		if err != nil {
			return err
		}
		var failed []int64
		for _, op := range ops {
			if op.Status == transfer.StatusFailed {
				failed = append(failed, op.ID)
				if dryRun {
					res.Operations = append(res.Operations, transfer.AfterReset(op))
				}
			}
		}
		if len(failed) == 0 {
			return &transfer.StatusConflictError{ID: ops[0].ID, Kind: ops[0].Kind, Current: ops[len(ops)-1].Status,
				Want: fmt.Sprintf("no operation behind %s %d is FAILED (%s)", kind, id, statusList(ops))}
		}
		if dryRun {
			return nil
		}
		if _, err := s.resetIDs(ctx, tx, failed, actor, reason); err != nil {
			return err
		}
		res.Operations, err = s.operations(ctx, tx, failed)
		return err
	})
	return res, err
}

func statusList(ops []transfer.Operation) string {
	out := ""
	for i, op := range ops {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d is %s", op.Kind, op.ID, op.Status)
	}
	return out
}

// ResetAllLegacy resets the FAILED operations behind every legacy row of kind.
func (s *Store) ResetAllLegacy(ctx context.Context, kind transfer.LegacyKind, actor, reason string, dryRun bool) (transfer.LegacyResetAll, error) {
	res := transfer.LegacyResetAll{IDs: []int64{}, OperationIDs: []int64{}, DryRun: dryRun}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var rows []struct {
			ID int64 `db:"id"`
			Op int64 `db:"op"`
		}
		q := `SELECT l.id, o.id AS op FROM long_term_archive_transfers l JOIN operations o ON o.id = l.operation_id
		       WHERE o.status = 'FAILED' ORDER BY o.id FOR UPDATE OF o`
		if kind == transfer.LegacyDataTransfer {
			q = `SELECT d.id, o.id AS op FROM data_transfers d JOIN operations o ON o.id IN (d.transfer_operation_id, d.unpack_operation_id)
			      WHERE o.status = 'FAILED' ORDER BY o.id FOR UPDATE OF o`
		}
		if err := tx.SelectContext(ctx, &rows, q); err != nil {
			return err
		}
		seen := map[int64]bool{}
		for _, r := range rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				res.IDs = append(res.IDs, r.ID)
			}
			res.OperationIDs = append(res.OperationIDs, r.Op)
		}
		res.Count = len(res.IDs)
		if dryRun || len(rows) == 0 {
			return nil
		}
		_, err := s.resetIDs(ctx, tx, res.OperationIDs, actor, reason)
		return err
	})
	return res, err
}

// FailureHistory returns the history of operation (kind, id).
func (s *Store) FailureHistory(ctx context.Context, kind transfer.Kind, id int64) (transfer.FailureHistory, error) {
	op, err := s.Operation(ctx, kind, id)
	if err != nil {
		return transfer.FailureHistory{}, err
	}
	h := transfer.FailureHistory{OperationID: op.ID, OperationType: op.Kind, CurrentStatus: op.Status, RetryCount: op.RetryCount, MaxRetries: op.MaxRetries,
		Events: []transfer.HistoryEvent{}, Operation: op}
	err = s.DB.SelectContext(ctx, &h.Events, `
		SELECT h.at, h.event, h.from_status, h.to_status,
		       h.actor, h.reason, h.attempt, h.retry_count, f.error_type, f.message, f.retryable, f.log_path
		  FROM operation_history h LEFT JOIN operation_failures f ON f.history_id = h.id
		 WHERE h.operation_id = $1 ORDER BY h.id`, id)
	for _, e := range h.Events {
		if e.ErrorType != nil {
			h.Failures++
		}
	}
	return h, err
}

// uuids converts ids for pq.
func uuids(ids []uuid.UUID) any {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return pq.Array(s)
}
