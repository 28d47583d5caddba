package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
)

// deriveSQL computes each package's lifecycle state from its operation chain with
// transfer_derived_state (migration 00010, the one definition of the rule; see
// transfer.PackageState). %s is the WHERE clause choosing the packages (alias p).
const deriveSQL = `
SELECT p.raw_data_package_id AS id, p.state AS current,
  transfer_derived_state(p.raw_data_package_id, p.data_transfer_package_id) AS derived
FROM package_states p WHERE %s`

// refreshPackages stores the derived state of the packages chosen by where (with args) and
// returns the ones that changed.
func refreshPackages(ctx context.Context, q queryer, where string, args ...any) ([]transfer.StateChange, error) {
	// Lock the rows first, in one order, in a statement of their own: concurrent refreshes of
	// overlapping packages (a DTP's members) then wait for each other instead of deadlocking.
	if _, err := q.ExecContext(ctx, `SELECT 1 FROM package_states p WHERE `+where+
		` ORDER BY p.raw_data_package_id FOR NO KEY UPDATE`, args...); err != nil {
		return nil, err
	}
	return deriveAndStore(ctx, q, where, args...)
}

// deriveAndStore stores the derived states (the rows are locked by the caller, or it is one row).
func deriveAndStore(ctx context.Context, q queryer, where string, args ...any) ([]transfer.StateChange, error) {
	changes := []transfer.StateChange{}
	err := sqlx.SelectContext(ctx, q, &changes, `
		WITH d AS MATERIALIZED (`+fmt.Sprintf(deriveSQL, where)+`)
		UPDATE package_states p SET state = d.derived, state_changed_at = now(), updated_at = now()
		  FROM d WHERE p.raw_data_package_id = d.id AND d.current <> d.derived
		RETURNING d.id, d.current, d.derived`, args...)
	return changes, err
}

// refreshForOperation refreshes the packages whose chain includes op.
func refreshForOperation(ctx context.Context, q queryer, op transfer.Operation) ([]transfer.StateChange, error) {
	if op.RawDataPackageID != nil && op.DataTransferPackageID == nil {
		return deriveAndStore(ctx, q, `p.raw_data_package_id = $1`, *op.RawDataPackageID) // one row: no lock order to keep
	}
	return refreshForOperations(ctx, q, []int64{op.ID})
}

// refreshForOperations refreshes the packages whose chains include the operations ids.
func refreshForOperations(ctx context.Context, q queryer, ids []int64) ([]transfer.StateChange, error) {
	return refreshPackages(ctx, q, `p.raw_data_package_id IN (
		SELECT o.raw_data_package_id FROM operations o WHERE o.id = ANY($1) AND o.raw_data_package_id IS NOT NULL
		UNION
		SELECT m.raw_data_package_id FROM operations o JOIN data_transfer_package_members m
		    ON m.data_transfer_package_id = o.data_transfer_package_id WHERE o.id = ANY($1))`, pq.Array(ids))
}

// Reconcile recomputes the stored state of the packages ids and returns those that changed.
// Unknown ids are ignored.
func (s *Store) Reconcile(ctx context.Context, ids []uuid.UUID) ([]transfer.StateChange, error) {
	var changes []transfer.StateChange
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		changes, err = refreshPackages(ctx, tx, `p.raw_data_package_id = ANY($1::uuid[])`, uuids(ids))
		return err
	})
	return changes, err
}

// PackageExists reports whether package id entered the pipeline.
func (s *Store) PackageExists(ctx context.Context, id uuid.UUID) (bool, error) {
	var ok bool
	err := s.DB.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM package_states WHERE raw_data_package_id = $1)`, id)
	return ok, err
}

// Inconsistent returns the packages whose stored state differs from their derivation, from
// the package after `after` on, at most limit (keyset pages for the sweep), and the last id
// examined (nil at the end).
func (s *Store) Inconsistent(ctx context.Context, after uuid.UUID, limit int) ([]uuid.UUID, *uuid.UUID, error) {
	var rows []struct {
		ID      uuid.UUID `db:"id"`
		Current string    `db:"current"`
		Derived string    `db:"derived"`
	}
	err := s.DB.SelectContext(ctx, &rows, fmt.Sprintf(deriveSQL,
		`p.raw_data_package_id IN (SELECT raw_data_package_id FROM package_states WHERE raw_data_package_id > $1 ORDER BY raw_data_package_id LIMIT $2)`)+
		` ORDER BY p.raw_data_package_id`, after, limit)
	if err != nil {
		return nil, nil, err
	}
	var out []uuid.UUID
	for _, r := range rows {
		if r.Current != r.Derived {
			out = append(out, r.ID)
		}
	}
	if len(rows) < limit {
		return out, nil, nil
	}
	last := rows[len(rows)-1].ID
	return out, &last, nil
}

// locationsByRole returns the active locations of a role, by id.
func locationsByRole(ctx context.Context, q queryer, role string) ([]location, error) {
	var locs []location
	err := sqlx.SelectContext(ctx, q, &locs, `SELECT id, site_id, name FROM data_locations WHERE role = $1 AND active ORDER BY id`, role)
	return locs, err
}

type location struct {
	ID     int64  `db:"id"`
	SiteID int64  `db:"site_id"`
	Name   string `db:"name"`
}

func firstLocation(ctx context.Context, q queryer, role string) (location, error) {
	locs, err := locationsByRole(ctx, q, role)
	if err != nil {
		return location{}, err
	}
	if len(locs) == 0 {
		return location{}, fmt.Errorf("no active data location with role %s (see data_locations)", role)
	}
	return locs[0], nil
}

// Enter brings up to limit finalized raw data packages (ingest's raw_data_packages with status
// complete) that have no package state yet into the pipeline: a package state (WAITING) and
// its raw_data_package operation. With since, only packages finalized at or after it are looked
// at (ingest's (status, finalized_at) index; the planner's frequent rounds); without, all (its
// periodic full pass, which also catches packages replayed late with an old finalized_at). It
// returns how many entered.
func (s *Store) Enter(ctx context.Context, limit int, since *time.Time) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		src, err := firstLocation(ctx, tx, "source")
		if err != nil {
			return err
		}
		buf, err := firstLocation(ctx, tx, "buffer")
		if err != nil {
			return err
		}
		return tx.GetContext(ctx, &n, `
			WITH new AS (
				SELECT r.id, r.name, r.size_bytes, r.instrument_module_id, r.finalized_at FROM raw_data_packages r
				 WHERE r.status = 'complete' AND ($6::timestamptz IS NULL OR r.finalized_at >= $6)
				   AND NOT EXISTS (SELECT 1 FROM package_states p WHERE p.raw_data_package_id = r.id)
				 ORDER BY r.finalized_at LIMIT $1),
			ps AS (
				INSERT INTO package_states (raw_data_package_id, state, name, size_bytes, instrument_module_id, finalized_at)
				SELECT id, 'WAITING', coalesce(name::text, ''), coalesce(size_bytes, 0), instrument_module_id, coalesce(finalized_at, now()) FROM new
				ON CONFLICT DO NOTHING RETURNING raw_data_package_id),
			op AS (
				INSERT INTO operations (kind, raw_data_package_id, site_id, source_location_id, destination_location_id, max_retries)
				SELECT 'raw_data_package', raw_data_package_id, $2, $3, $4, $5 FROM ps
				ON CONFLICT (raw_data_package_id) WHERE kind = 'raw_data_package' DO NOTHING RETURNING id, status),
			h AS (INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT id, 'created', status, 'planner' FROM op)
			SELECT count(*) FROM op`, limit, src.SiteID, src.ID, buf.ID, s.MaxRetries, since)
	})
	return n, err
}

// EnterWatermark is where the planner's frequent Enter rounds start: the newest finalized_at
// among entered packages, less a margin for packages committed out of order.
func (s *Store) EnterWatermark(ctx context.Context, margin time.Duration) (*time.Time, error) {
	var t *time.Time
	err := s.DB.GetContext(ctx, &t, `SELECT max(finalized_at) - make_interval(secs => $1) FROM package_states`, seconds(margin))
	return t, err
}

// readyRow is a transfer.ReadyPackage as Group reads it, with the database's clock.
type readyRow struct {
	transfer.ReadyPackage
	Now time.Time `db:"now"` // for the age rule
}

// Group puts packages whose raw_data_package operation completed and that belong to no DTP yet
// into data transfer packages as g decides (transfer.Grouping.Groups), each with its
// data_transfer_package operation. It returns the number of DTPs made. The ready packages are
// the completed raw_data_package operations not yet advanced (grouped), read in completion order
// from their partial index (migration 00011): the read costs what is waiting, not what was done.
func (s *Store) Group(ctx context.Context, g transfer.Grouping, limit int) (int, error) {
	var rows []readyRow
	// The package's size by primary key per ready operation (a subquery, so PostgreSQL cannot
	// turn it into a hash join over every package without a DTP).
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT r.id, r.op, r.size_bytes, r.completed_at, r.now FROM (
			SELECT o.raw_data_package_id AS id, o.completed_at, o.id AS op, now() AS now,
			       (SELECT p.size_bytes FROM package_states p
			         WHERE p.raw_data_package_id = o.raw_data_package_id AND p.data_transfer_package_id IS NULL) AS size_bytes
			  FROM operations o
			 WHERE o.kind = 'raw_data_package' AND o.status = 'COMPLETED' AND NOT o.advanced
			 ORDER BY o.completed_at, o.id LIMIT $1) r
		 WHERE r.size_bytes IS NOT NULL ORDER BY r.completed_at, r.op`, limit); err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	ready := make([]transfer.ReadyPackage, len(rows))
	for i, r := range rows {
		ready[i] = r.ReadyPackage
	}
	made := 0
	for _, group := range g.Groups(ready, rows[0].Now) {
		if err := s.makeDTP(ctx, group); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// makeDTP makes one DTP of group (transfer_make_dtp, migration 00013: one call, the package
// rows locked in one order and written once, rows found by key).
func (s *Store) makeDTP(ctx context.Context, group []transfer.ReadyPackage) error {
	ids, ops := make([]uuid.UUID, len(group)), make([]int64, len(group))
	var size int64
	for i, p := range group {
		ids[i], ops[i] = p.ID, p.Op
		size += p.Size
	}
	buf, err := firstLocation(ctx, s.DB, "buffer")
	if err != nil {
		return err
	}
	return retry(func() error {
		_, err := s.DB.ExecContext(ctx, `SELECT transfer_make_dtp($1::uuid[], $2::bigint[], $3, $4, $5, $6)`,
			uuids(ids), pq.Array(ops), buf.ID, buf.SiteID, size, s.MaxRetries)
		return err
	})
}

// SuccessorKinds are the kinds whose completion the planner answers in Advance (a
// raw_data_package operation is followed by its DTP, made by Group; long_term_archive and
// staging are the ends of their chains), as an SQL list. It matches the operations_to_advance
// index; the tests' driver (transfertest) asks it whether work is left.
const SuccessorKinds = `('data_transfer_package', 'transfer', 'unpack')`

// Advance creates the successors of up to limit completed operations the planner has not yet
// advanced: a built DTP gets a transfer (and legacy data_transfer row) to every active
// long-term archive location; a completed transfer gets its unpack; a completed unpack gets a
// long_term_archive operation (and legacy row) for each package of the DTP at that location.
// Every insert is ON CONFLICT DO NOTHING, so advancing twice creates nothing twice.
func (s *Store) Advance(ctx context.Context, limit int) (int, error) {
	var ids []int64
	if err := s.DB.SelectContext(ctx, &ids, `SELECT id FROM operations
		WHERE status = 'COMPLETED' AND NOT advanced AND kind IN `+SuccessorKinds+` ORDER BY id LIMIT $1`, limit); err != nil {
		return 0, err
	}
	for _, id := range ids {
		if err := s.inTx(ctx, func(tx *sqlx.Tx) error { return s.advance(ctx, tx, id) }); err != nil {
			return 0, fmt.Errorf("advance operation %d: %w", id, err)
		}
	}
	return len(ids), nil
}

func (s *Store) advance(ctx context.Context, tx *sqlx.Tx, id int64) error {
	var op struct {
		Kind string        `db:"kind"`
		DTP  sql.NullInt64 `db:"data_transfer_package_id"`
		Dest sql.NullInt64 `db:"destination_location_id"`
		Src  sql.NullInt64 `db:"source_location_id"`
	}
	err := tx.GetContext(ctx, &op, `SELECT kind, data_transfer_package_id, destination_location_id, source_location_id FROM operations
		WHERE id = $1 AND status = 'COMPLETED' AND NOT advanced AND kind IN `+SuccessorKinds+` FOR UPDATE SKIP LOCKED`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // advanced meanwhile, or reset
	}
	if err != nil {
		return err
	}
	// The DTP state change this completion may make (transfer.DTPStateAfter); the statements
	// below ask the rows whether it is the last of its kind.
	from, to, _ := transfer.DTPStateAfter(transfer.Kind(op.Kind))
	switch transfer.Kind(op.Kind) {
	case transfer.KindDataTransferPackage:
		archives, err := locationsByRole(ctx, tx, "long_term_archive")
		if err != nil {
			return err
		}
		for _, a := range archives {
			if _, err := tx.ExecContext(ctx, `
				WITH op AS (
					INSERT INTO operations (kind, data_transfer_package_id, site_id, source_location_id, destination_location_id, max_retries)
					VALUES ('transfer', $1, $2, $3, $4, $5)
					ON CONFLICT (data_transfer_package_id, destination_location_id) WHERE kind = 'transfer' DO NOTHING RETURNING id, status),
				h AS (INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT id, 'created', status, 'planner' FROM op)
				INSERT INTO data_transfers (data_transfer_package_id, origin_location_id, destination_location_id, transfer_operation_id)
				SELECT $1, $3, $4, id FROM op`, op.DTP, a.SiteID, op.Src, a.ID, s.MaxRetries); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data_transfer_packages SET state = $3, updated_at = now() WHERE id = $1 AND state = $2`, op.DTP, string(from), string(to)); err != nil {
			return err
		}
	case transfer.KindTransfer:
		if _, err := tx.ExecContext(ctx, `
			WITH op AS (
				INSERT INTO operations (kind, data_transfer_package_id, site_id, source_location_id, destination_location_id, max_retries)
				SELECT 'unpack', $1, l.site_id, l.id, l.id, $3 FROM data_locations l WHERE l.id = $2
				ON CONFLICT (data_transfer_package_id, destination_location_id) WHERE kind = 'unpack' DO NOTHING RETURNING id, status),
			h AS (INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT id, 'created', status, 'planner' FROM op)
			UPDATE data_transfers d SET unpack_operation_id = op.id, updated_at = now() FROM op
			 WHERE d.data_transfer_package_id = $1 AND d.destination_location_id = $2`, op.DTP, op.Dest, s.MaxRetries); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data_transfer_packages SET state = $3, updated_at = now()
			WHERE id = $1 AND state = $2
			  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = $1 AND o.kind = 'transfer' AND o.status <> 'COMPLETED')`, op.DTP, string(from), string(to)); err != nil {
			return err
		}
	case transfer.KindUnpack:
		if _, err := tx.ExecContext(ctx, `
			WITH op AS (
				INSERT INTO operations (kind, raw_data_package_id, site_id, source_location_id, destination_location_id, max_retries)
				SELECT 'long_term_archive', m.raw_data_package_id, l.site_id, l.id, l.id, $3
				  FROM data_transfer_package_members m, data_locations l WHERE m.data_transfer_package_id = $1 AND l.id = $2
				ON CONFLICT (raw_data_package_id, destination_location_id) WHERE kind = 'long_term_archive' DO NOTHING
				RETURNING id, status, raw_data_package_id),
			h AS (INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT id, 'created', status, 'planner' FROM op)
			INSERT INTO long_term_archive_transfers (raw_data_package_id, location_id, operation_id)
			SELECT raw_data_package_id, $2, id FROM op`, op.DTP, op.Dest, s.MaxRetries); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data_transfer_packages SET state = $3, updated_at = now()
			WHERE id = $1 AND state = $2
			  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.data_transfer_package_id = $1 AND o.kind IN ('transfer', 'unpack') AND o.status <> 'COMPLETED')
			  AND (SELECT count(*) FROM operations o WHERE o.data_transfer_package_id = $1 AND o.kind = 'unpack')
			    = (SELECT count(*) FROM operations o WHERE o.data_transfer_package_id = $1 AND o.kind = 'transfer')`, op.DTP, string(from), string(to)); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE operations SET advanced = true WHERE id = $1`, id); err != nil {
		return err
	}
	_, err = refreshForOperations(ctx, tx, []int64{id})
	return err
}

// StagingJobByID reads a staging job with its operations (not found: problem.ErrNotFound).
func (s *Store) StagingJobByID(ctx context.Context, id int64) (transfer.StagingJob, error) {
	job := transfer.StagingJob{ID: id}
	var ids pq.Int64Array
	err := s.DB.QueryRowContext(ctx, `
		SELECT j.requested_by, l.name, ARRAY(SELECT o.id FROM operations o WHERE o.staging_job_id = j.id ORDER BY o.id)
		  FROM staging_jobs j JOIN data_locations l ON l.id = j.destination_location_id WHERE j.id = $1`, id).
		Scan(&job.RequestedBy, &job.Destination, &ids)
	if errors.Is(err, sql.ErrNoRows) {
		return job, transfer.NotFound("staging job", id)
	}
	if err != nil {
		return job, err
	}
	job.Operations, err = s.operations(ctx, s.DB, ids)
	return job, err
}

// StagingJobs lists staging jobs newest first, actor's or (actor "") everyone's, each with its
// operations counted by status.
func (s *Store) StagingJobs(ctx context.Context, actor string, limit, offset int) (transfer.Page[transfer.StagingSummary], error) {
	page := transfer.Page[transfer.StagingSummary]{Items: []transfer.StagingSummary{}, Limit: limit, Offset: offset}
	if err := s.DB.GetContext(ctx, &page.Total, `SELECT count(*) FROM staging_jobs WHERE $1 = '' OR requested_by = $1`, actor); err != nil {
		return page, err
	}
	rows, err := s.DB.QueryxContext(ctx, `
		SELECT j.id, j.requested_by, l.name AS destination, j.reason, j.created_at,
		       EXISTS (SELECT 1 FROM operations o WHERE o.staging_job_id = j.id AND o.status IN ('PENDING', 'SCHEDULED', 'IN_PROGRESS')) AS open,
		       COALESCE((SELECT json_object_agg(status, n) FROM (SELECT o.status, count(*) AS n FROM operations o
		                  WHERE o.staging_job_id = j.id GROUP BY o.status) c), '{}') AS counts
		  FROM staging_jobs j JOIN data_locations l ON l.id = j.destination_location_id
		 WHERE $1 = '' OR j.requested_by = $1
		 ORDER BY j.id DESC LIMIT $2 OFFSET $3`, actor, limit, offset)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		var j transfer.StagingSummary
		var counts []byte
		if err := rows.Scan(&j.ID, &j.RequestedBy, &j.Destination, &j.Reason, &j.CreatedAt, &j.Open, &counts); err != nil {
			return page, err
		}
		if err := json.Unmarshal(counts, &j.Operations); err != nil {
			return page, err
		}
		page.Items = append(page.Items, j)
	}
	return page, rows.Err()
}

// CreateStaging requests staging of archived packages to a processing location (the first
// active one when destination is empty): one staging operation per package, from an archive
// location holding it.
func (s *Store) CreateStaging(ctx context.Context, actor string, packages []uuid.UUID, destination, reason string, maxOpen int) (transfer.StagingJob, error) {
	job := transfer.StagingJob{RequestedBy: actor}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var dest location
		var err error
		if maxOpen > 0 { // one user's requests one at a time, so the count below cannot be passed
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('obsops:staging:' || $1))`, actor); err != nil {
				return err
			}
			var open int
			if err := tx.GetContext(ctx, &open, `
				SELECT count(*) FROM staging_jobs j WHERE j.requested_by = $1 AND EXISTS (
				  SELECT 1 FROM operations o WHERE o.staging_job_id = j.id AND o.status IN ('PENDING', 'SCHEDULED', 'IN_PROGRESS'))`,
				actor); err != nil {
				return err
			}
			if open >= maxOpen {
				return transfer.ErrTooManyStagingJobs
			}
		}
		if destination == "" {
			dest, err = firstLocation(ctx, tx, "processing")
			if err != nil {
				return err
			}
		} else if err = tx.GetContext(ctx, &dest, `SELECT id, site_id, name FROM data_locations WHERE name = $1 AND role = 'processing' AND active`, destination); errors.Is(err, sql.ErrNoRows) {
			return problem.Field("body.destination_location", "no active processing location of this name", destination)
		} else if err != nil {
			return err
		}
		job.Destination = dest.Name
		sources := make([]int64, len(packages))
		for i, p := range packages {
			var st struct {
				State string        `db:"state"`
				Src   sql.NullInt64 `db:"src"`
			}
			err := tx.GetContext(ctx, &st, `
				SELECT p.state, (SELECT o.destination_location_id FROM operations o WHERE o.raw_data_package_id = p.raw_data_package_id
				                   AND o.kind = 'long_term_archive' AND o.status = 'COMPLETED' ORDER BY o.completed_at LIMIT 1) AS src
				  FROM package_states p WHERE p.raw_data_package_id = $1`, p)
			if errors.Is(err, sql.ErrNoRows) {
				return problem.Field(fmt.Sprintf("body.raw_data_package_ids[%d]", i), "no such package in the transfer pipeline", p.String())
			}
			if err != nil {
				return err
			}
			if st.State != string(transfer.StateArchived) {
				return problem.Field(fmt.Sprintf("body.raw_data_package_ids[%d]", i), "package is "+st.State+"; only ARCHIVED packages can be staged", p.String())
			}
			if st.Src.Valid {
				sources[i] = st.Src.Int64
			} else if err := tx.GetContext(ctx, &sources[i], `SELECT c.location_id FROM physical_copies c JOIN data_locations l ON l.id = c.location_id
				WHERE c.raw_data_package_id = $1 AND l.role = 'long_term_archive' ORDER BY c.id LIMIT 1`, p); err != nil {
				return err
			}
		}
		if err := tx.GetContext(ctx, &job.ID, `INSERT INTO staging_jobs (requested_by, destination_location_id, reason) VALUES ($1, $2, $3) RETURNING id`,
			actor, dest.ID, reason); err != nil {
			return err
		}
		var ids []int64
		for i, p := range packages {
			var id int64
			err := tx.GetContext(ctx, &id, `
				WITH op AS (
					INSERT INTO operations (kind, raw_data_package_id, staging_job_id, site_id, source_location_id, destination_location_id, max_retries)
					VALUES ('staging', $1, $2, $3, $4, $5, $6)
					ON CONFLICT (staging_job_id, raw_data_package_id) WHERE kind = 'staging' DO NOTHING RETURNING id, status),
				h AS (INSERT INTO operation_history (operation_id, event, to_status, actor) SELECT id, 'created', status, $7 FROM op)
				SELECT id FROM op`, p, job.ID, dest.SiteID, sources[i], dest.ID, s.MaxRetries, actor)
			if errors.Is(err, sql.ErrNoRows) {
				continue // the same package listed twice
			}
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		job.Operations, err = s.operations(ctx, tx, ids)
		return err
	})
	return job, err
}

// SetReplication stores rule as the replication rule transfer_replicated applies
// (transfer_replication_rule) and, if that changed it, derives every package's state again in
// the same transaction; it answers how many states changed. A site the rule names must exist
// (problem.FieldError naming OPS_ARCHIVE_SITES otherwise).
func (s *Store) SetReplication(ctx context.Context, rule transfer.Replication) (int, error) {
	sites := rule.Sites
	if sites == nil {
		sites = []string{}
	}
	var minCopies *int
	if rule.MinCopies > 0 {
		minCopies = &rule.MinCopies
	}
	n := 0
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var unknown []string
		if err := tx.SelectContext(ctx, &unknown, `SELECT n FROM unnest($1::text[]) AS n WHERE NOT EXISTS (SELECT 1 FROM sites s WHERE s.name = n)`, pq.Array(sites)); err != nil {
			return err
		}
		if len(unknown) > 0 {
			return problem.Field("OPS_ARCHIVE_SITES", "no such site", unknown)
		}
		var changed bool
		if err := tx.GetContext(ctx, &changed, `
			WITH u AS (
				UPDATE transfer_replication_rule SET min_copies = $1, sites = $2, updated_at = now()
				 WHERE min_copies IS DISTINCT FROM $1 OR sites <> $2::text[] RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM u)`, minCopies, pq.Array(sites)); err != nil || !changed {
			return err
		}
		changes, err := refreshPackages(ctx, tx, `true`)
		n = len(changes)
		return err
	})
	return n, err
}
