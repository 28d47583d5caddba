package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"

	"github.com/obsops/obsops/services/transfer"
)

// listFilter builds the filter of q shared by both lists; siteExists is the EXISTS clause for a site
// filter with $N standing for the site id's placeholder.
func listFilter(q transfer.ListQuery, args *[]any, siteExists string) string {
	var conds []string
	add := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	if q.State != "" {
		conds = append(conds, "x.state = "+add(q.State))
	}
	if q.Site != "" {
		conds = append(conds, strings.ReplaceAll(siteExists, "$N", "(SELECT id FROM sites WHERE name = "+add(q.Site)+")"))
	}
	if q.From != nil {
		conds = append(conds, "x.created_at >= "+add(*q.From))
	}
	if q.To != nil {
		conds = append(conds, "x.created_at < "+add(*q.To))
	}
	if q.Execution != uuid.Nil { // raw data packages only (x is package_states)
		conds = append(conds, "x.raw_data_package_id IN (SELECT id FROM raw_data_packages WHERE executed_obs_unit_id = "+add(q.Execution)+")")
	}
	if q.Module != 0 {
		conds = append(conds, "x.instrument_module_id = "+add(q.Module))
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// SiteExists reports whether a site of that name exists.
func (s *Store) SiteExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := s.DB.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM sites WHERE name = $1)`, name)
	return ok, err
}

const chainColumns = `o.id, o.kind, o.status, o.retry_count, s.name AS site, dst.name AS destination_location, o.updated_at`

// RawPackages lists packages in the pipeline, newest first, each with its chain.
func (s *Store) RawPackages(ctx context.Context, q transfer.ListQuery) (transfer.Page[transfer.RawPackage], error) {
	page := transfer.Page[transfer.RawPackage]{Items: []transfer.RawPackage{}, Limit: q.Limit, Offset: q.Offset}
	var args []any
	where := listFilter(q, &args, `EXISTS (SELECT 1 FROM operations o WHERE o.site_id = $N AND
		(o.raw_data_package_id = x.raw_data_package_id OR o.data_transfer_package_id = x.data_transfer_package_id))`)
	if err := s.DB.GetContext(ctx, &page.Total, `SELECT count(*) FROM package_states x WHERE `+where, args...); err != nil {
		return page, err
	}
	args = append(args, q.Limit, q.Offset)
	if err := s.DB.SelectContext(ctx, &page.Items, `
		SELECT raw_data_package_id, name, state, size_bytes, instrument_module_id, data_transfer_package_id, finalized_at, state_changed_at, created_at
		  FROM package_states x WHERE `+where+`
		 ORDER BY created_at DESC, raw_data_package_id DESC LIMIT $`+strconv.Itoa(len(args)-1)+` OFFSET $`+strconv.Itoa(len(args)), args...); err != nil {
		return page, err
	}
	if len(page.Items) == 0 {
		return page, nil
	}
	ids := make([]uuid.UUID, len(page.Items))
	for i, p := range page.Items {
		ids[i] = p.ID
	}
	byOwner, err := chainsOf(ctx, s.DB, ids)
	if err != nil {
		return page, err
	}
	for i := range page.Items {
		page.Items[i].Chain = byOwner[page.Items[i].ID.String()]
		if page.Items[i].Chain == nil {
			page.Items[i].Chain = []transfer.ChainStep{}
		}
	}
	return page, nil
}

// chainsOf reads the chains of packages ids (their operations and their DTPs'), by package id.
func chainsOf(ctx context.Context, q sqlx.QueryerContext, ids []uuid.UUID) (map[string][]transfer.ChainStep, error) {
	var steps []transfer.ChainStep
	if err := sqlx.SelectContext(ctx, q, &steps, `
		SELECT `+chainColumns+`, x.raw_data_package_id::text AS owner FROM package_states x
		  JOIN operations o ON o.raw_data_package_id = x.raw_data_package_id
		  JOIN sites s ON s.id = o.site_id LEFT JOIN data_locations dst ON dst.id = o.destination_location_id
		 WHERE x.raw_data_package_id = ANY($1::uuid[])
		UNION ALL
		SELECT `+chainColumns+`, x.raw_data_package_id::text FROM package_states x
		  JOIN operations o ON o.data_transfer_package_id = x.data_transfer_package_id
		  JOIN sites s ON s.id = o.site_id LEFT JOIN data_locations dst ON dst.id = o.destination_location_id
		 WHERE x.raw_data_package_id = ANY($1::uuid[])
		ORDER BY id`, uuids(ids)); err != nil {
		return nil, err
	}
	byOwner := map[string][]transfer.ChainStep{}
	for _, st := range steps {
		byOwner[st.Owner] = append(byOwner[st.Owner], st)
	}
	return byOwner, nil
}

// TransferPackages lists data transfer packages, newest first, each with its chain.
func (s *Store) TransferPackages(ctx context.Context, q transfer.ListQuery) (transfer.Page[transfer.TransferPackage], error) {
	page := transfer.Page[transfer.TransferPackage]{Items: []transfer.TransferPackage{}, Limit: q.Limit, Offset: q.Offset}
	var args []any
	where := listFilter(q, &args, `EXISTS (SELECT 1 FROM operations o WHERE o.site_id = $N AND o.data_transfer_package_id = x.id)`)
	if err := s.DB.GetContext(ctx, &page.Total, `SELECT count(*) FROM data_transfer_packages x WHERE `+where, args...); err != nil {
		return page, err
	}
	args = append(args, q.Limit, q.Offset)
	if err := s.DB.SelectContext(ctx, &page.Items, `
		SELECT x.id, x.name, x.state, x.package_count, x.size_bytes, l.name AS location, x.created_at, x.updated_at
		  FROM data_transfer_packages x JOIN data_locations l ON l.id = x.location_id WHERE `+where+`
		 ORDER BY x.created_at DESC, x.id DESC LIMIT $`+strconv.Itoa(len(args)-1)+` OFFSET $`+strconv.Itoa(len(args)), args...); err != nil {
		return page, err
	}
	if len(page.Items) == 0 {
		return page, nil
	}
	ids := make([]int64, len(page.Items))
	for i, p := range page.Items {
		ids[i] = p.ID
	}
	var steps []transfer.ChainStep
	if err := s.DB.SelectContext(ctx, &steps, `
		SELECT `+chainColumns+`, o.data_transfer_package_id::text AS owner FROM operations o
		  JOIN sites s ON s.id = o.site_id LEFT JOIN data_locations dst ON dst.id = o.destination_location_id
		 WHERE o.data_transfer_package_id = ANY($1) ORDER BY o.id`, pq.Array(ids)); err != nil {
		return page, err
	}
	byOwner := map[string][]transfer.ChainStep{}
	for _, st := range steps {
		byOwner[st.Owner] = append(byOwner[st.Owner], st)
	}
	for i := range page.Items {
		page.Items[i].Chain = byOwner[strconv.FormatInt(page.Items[i].ID, 10)]
		if page.Items[i].Chain == nil {
			page.Items[i].Chain = []transfer.ChainStep{}
		}
	}
	return page, nil
}

// Counts returns the maintained overview counters (Counters) and the last published seq.
func (s *Store) Counts(ctx context.Context) (map[string]int64, int64, error) {
	counts, err := s.Counters(ctx)
	if err != nil {
		return nil, 0, err
	}
	seq, err := s.Seq(ctx)
	return counts, seq, err
}

// Counters returns the maintained overview counters: folded values plus pending deltas.
func (s *Store) Counters(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Key   string `db:"key"`
		Value int64  `db:"value"`
	}
	if err := s.DB.SelectContext(ctx, &rows, `
		SELECT key, sum(v)::bigint AS value FROM (
			SELECT key, value AS v FROM transfer_counters
			UNION ALL SELECT key, delta FROM transfer_counter_deltas) c GROUP BY key`); err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(rows))
	for _, r := range rows {
		counts[r.Key] = r.Value
	}
	return counts, nil
}

// Seq is the last published overview seq (0 before the first).
func (s *Store) Seq(ctx context.Context) (int64, error) {
	var row struct {
		Last   int64 `db:"last_value"`
		Called bool  `db:"is_called"`
	}
	if err := s.DB.GetContext(ctx, &row, `SELECT last_value, is_called FROM transfer_overview_seq`); err != nil {
		return 0, err
	}
	if !row.Called {
		return 0, nil
	}
	return row.Last, nil
}

// NextSeq takes the next overview seq.
func (s *Store) NextSeq(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.GetContext(ctx, &n, `SELECT nextval('transfer_overview_seq')`)
	return n, err
}

// FoldCounters moves the pending counter deltas into the counters; exact under concurrency
// (each delta row is deleted by exactly one fold, in the transaction that adds it).
func (s *Store) FoldCounters(ctx context.Context) error {
	_, err := s.DB.ExecContext(ctx, `
		WITH d AS (DELETE FROM transfer_counter_deltas RETURNING key, delta),
		     t AS (SELECT key, sum(delta)::bigint AS v FROM d GROUP BY key)
		INSERT INTO transfer_counters (key, value) SELECT key, v FROM t
		ON CONFLICT (key) DO UPDATE SET value = transfer_counters.value + EXCLUDED.value`)
	return err
}

// RawPackage reads one package in the pipeline as RawPackages lists it, with its registered
// checksum (ingest's raw_data_packages) and its physical copies and its DTP's.
func (s *Store) RawPackage(ctx context.Context, id uuid.UUID) (transfer.RawPackageDetail, error) {
	var d transfer.RawPackageDetail
	err := database.InReadTx(ctx, s.DB, func(tx *sqlx.Tx) error {
		var p []transfer.RawPackage
		if err := tx.SelectContext(ctx, &p, `
			SELECT raw_data_package_id, name, state, size_bytes, instrument_module_id, data_transfer_package_id, finalized_at, state_changed_at, created_at
			  FROM package_states WHERE raw_data_package_id = $1`, id); err != nil {
			return err
		}
		if len(p) == 0 {
			return transfer.NotFound("raw data package in the transfer pipeline", id)
		}
		d.RawPackage = p[0]
		if err := tx.GetContext(ctx, &d.Checksum, `SELECT (SELECT checksum FROM raw_data_packages WHERE id = $1)`, id); err != nil {
			return err
		}
		chains, err := chainsOf(ctx, tx, []uuid.UUID{id})
		if err != nil {
			return err
		}
		d.Chain = chains[id.String()]
		if d.Chain == nil {
			d.Chain = []transfer.ChainStep{}
		}
		d.Copies = []transfer.PhysicalCopy{}
		return tx.SelectContext(ctx, &d.Copies, `
			SELECT s.name AS site, l.name AS location, l.role AS location_role, c.path, c.checksum, c.size_bytes, c.verified_at,
			       c.operation_id, c.data_transfer_package_id, c.created_at
			  FROM physical_copies c JOIN data_locations l ON l.id = c.location_id JOIN sites s ON s.id = l.site_id
			 WHERE c.raw_data_package_id = $1 OR ($2::bigint IS NOT NULL AND c.data_transfer_package_id = $2 AND c.raw_data_package_id IS NULL)
			 ORDER BY c.id`, id, d.DataTransferPackageID)
	})
	return d, err
}

// Operations lists operations of q.Kind and q.Status (either "" for any), newest first. The
// total comes from the maintained counters (op:<kind>:<status>, Counters): constant time
// whatever the filter, where a count(*) of COMPLETED operations would read most of the table.
func (s *Store) Operations(ctx context.Context, q transfer.OperationQuery) (transfer.Page[transfer.Operation], error) {
	page := transfer.Page[transfer.Operation]{Items: []transfer.Operation{}, Limit: q.Limit, Offset: q.Offset}
	counts, err := s.Counters(ctx)
	if err != nil {
		return page, err
	}
	for _, k := range transfer.Kinds() {
		for _, st := range transfer.Statuses() {
			if (q.Kind == "" || q.Kind == k) && (q.Status == "" || q.Status == st) {
				page.Total += int(counts["op:"+string(k)+":"+string(st)])
			}
		}
	}
	err = s.DB.SelectContext(ctx, &page.Items, `SELECT `+opColumns+opFrom+`
		WHERE ($1 = '' OR o.kind = $1) AND ($2 = '' OR o.status = $2) ORDER BY o.id DESC LIMIT $3 OFFSET $4`,
		string(q.Kind), string(q.Status), q.Limit, q.Offset)
	return page, err
}

// Lag is what the metrics read besides the counters: the leases past their deadline that the
// planner has not yet expired, and how old the oldest package not yet archived is.
type Lag struct {
	OverdueLeases     int64   `db:"overdue"`
	OverdueSeconds    float64 `db:"overdue_seconds"`
	UnarchivedSeconds float64 `db:"unarchived_seconds"`
}

// Lag reads the Lag in one statement, from indexes (operations_leases; package_states_state_list).
func (s *Store) Lag(ctx context.Context) (Lag, error) {
	var l Lag
	err := s.DB.GetContext(ctx, &l, `
		SELECT (SELECT count(*) FROM operations WHERE status = 'IN_PROGRESS' AND lease_expires_at < now()) AS overdue,
		       coalesce(extract(epoch FROM now() - (SELECT min(lease_expires_at) FROM operations WHERE status = 'IN_PROGRESS')), 0)::float8 AS overdue_seconds,
		       coalesce(extract(epoch FROM now() - least(
		           (SELECT min(created_at) FROM package_states WHERE state = 'WAITING'),
		           (SELECT min(created_at) FROM package_states WHERE state = 'TRANSFERRING'))), 0)::float8 AS unarchived_seconds`)
	if l.OverdueSeconds < 0 {
		l.OverdueSeconds = 0
	}
	return l, err
}
