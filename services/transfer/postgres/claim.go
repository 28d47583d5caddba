package postgres

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/groupcommit"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/transfer"
)

// claimSQL leases due PENDING operations of kind $1 (at site $2 unless empty) to several claims
// in one statement: claim k is holder $3[k] wanting up to $4[k] operations, and $5 is the sum of
// $4. It locks up to $5 operations (FOR UPDATE SKIP LOCKED, due first), gives claim 1 the first
// $4[1] of them, claim 2 the next $4[2], and so on, leases each to its claim's holder for $6
// seconds, appends each one's history entry (actor: its holder) and answers them with the claim
// k they went to. One claim alone is the same statement with one-element arrays. The scan starts
// after (next_attempt_at, id) = ($7, $8) (see claimMarks; the zero time starts at the head).
// $9, unless NULL, are a mover's data locations: only operations whose source or destination is
// one of them are leased (the others are skipped in the scan, never locked).
const claimSQL = `
	WITH q AS (
		SELECT q.holder, q.k::integer AS k, q.m, sum(q.m) OVER (ORDER BY q.k) - q.m AS skip
		  FROM unnest($3::text[], $4::integer[]) WITH ORDINALITY AS q (holder, m, k)),
	c AS (
		SELECT c.id, row_number() OVER (ORDER BY c.next_attempt_at, c.id) AS n FROM (
			SELECT id, next_attempt_at FROM operations
			 WHERE status = 'PENDING' AND kind = $1 AND next_attempt_at <= now()
			   AND ($2 = '' OR site_id = (SELECT id FROM sites WHERE name = $2))
			   AND (next_attempt_at, id) > ($7, $8)
			   AND ($9::integer[] IS NULL OR source_location_id = ANY($9) OR destination_location_id = ANY($9))
			 ORDER BY next_attempt_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) c),
	a AS (
		SELECT c.id, q.k, q.holder FROM c JOIN q ON c.n > q.skip AND c.n <= q.skip + q.m),
	o AS (
		UPDATE operations o SET status = 'IN_PROGRESS', attempt = o.attempt + 1, lease_holder = a.holder,
		       lease_expires_at = now() + make_interval(secs => $6), started_at = now(), updated_at = now()
		  FROM a WHERE o.id = a.id
		RETURNING o.*, a.k),
	h AS (
		INSERT INTO operation_history (operation_id, event, from_status, to_status, actor, attempt, retry_count)
		SELECT id, 'claimed', 'PENDING', 'IN_PROGRESS', lease_holder, attempt, retry_count FROM o)
	SELECT o.k, ` + opColumns + ` FROM o JOIN sites s ON s.id = o.site_id
	  LEFT JOIN data_locations src ON src.id = o.source_location_id
	  LEFT JOIN data_locations dst ON dst.id = o.destination_location_id
	 ORDER BY o.k, o.id`

// claimGroup says which claims can share a statement: the same kinds in the same order at the
// same site, for the same data locations.
func claimGroup(r transfer.ClaimRequest) string {
	var b strings.Builder
	b.WriteString(r.Site)
	for _, k := range r.Kinds {
		b.WriteByte(0)
		b.WriteString(string(k))
	}
	b.WriteByte(1)
	b.WriteString(locationsKey(r.Locations))
	return b.String()
}

// locationsKey names a claim's location filter: "*" for every location, else the ids.
func locationsKey(locations []int64) string {
	if locations == nil {
		return "*"
	}
	var b strings.Builder
	for _, l := range locations {
		b.WriteString(strconv.FormatInt(l, 10))
		b.WriteByte(',')
	}
	return b.String()
}

// Claim leases up to max due PENDING operations of the given kinds (at site, when not empty) to
// holder: FOR UPDATE SKIP LOCKED, so concurrent movers never lease one operation twice. Kinds are
// served in the order given. A claim of one kind is one statement (its own transaction, one
// round trip) that leases, appends the history entries and answers the leased operations, sorted
// by id.
func (s *Store) Claim(ctx context.Context, holder string, kinds []transfer.Kind, site string, max int) ([]transfer.Operation, error) {
	res, err := s.ClaimAll(ctx, kinds, site, []transfer.ClaimRequest{{Holder: holder, Kinds: kinds, Site: site, Max: max}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// ClaimAll serves several claims of the same kinds at the same site together, as if one after the
// other (claim 1 first): each kind is one statement for all of them (claimSQL), a claim of several
// kinds taking from the next kind only what the ones before could not give it (all kinds in one
// transaction). Each claim gets at most its Max, its own lease holder and history entries, and its
// operations sorted by id. An unknown site is a problem.FieldError (body.site). On an error nothing was leased.
func (s *Store) ClaimAll(ctx context.Context, kinds []transfer.Kind, site string, reqs []transfer.ClaimRequest) ([][]transfer.Operation, error) {
	return s.claimAll(ctx, kinds, site, reqs, nil)
}

// claimAll is ClaimAll; with marks, a claim of one kind starts its scan where marks say (marks
// are kept per site and location filter, since a scan passes over other locations' operations).
func (s *Store) claimAll(ctx context.Context, kinds []transfer.Kind, site string, reqs []transfer.ClaimRequest, marks *claimMarks) ([][]transfer.Operation, error) {
	st, err := s.prepared(ctx, claimSQL)
	if err != nil {
		return nil, err
	}
	// Every claim of a round's group has the same locations (claimGroup).
	locations, scope := reqs[0].Locations, site+"\x00"+locationsKey(reqs[0].Locations)
	holders, want := make([]string, len(reqs)), make([]int64, len(reqs))
	for i, r := range reqs {
		holders[i], want[i] = r.Holder, int64(r.Max)
	}
	out := make([][]transfer.Operation, len(reqs))
	for i := range out {
		out[i] = []transfer.Operation{}
	}
	claimKind := func(stmt *sqlx.Stmt, k transfer.Kind, marks *claimMarks) error {
		var total int64
		for _, m := range want {
			total += m
		}
		if total == 0 {
			return nil
		}
		var rows []struct {
			K int `db:"k"`
			transfer.Operation
		}
		now := time.Now()
		from, head := marks.start(k, scope, now)
		if err := stmt.SelectContext(ctx, &rows, string(k), site, pq.Array(holders), pq.Array(want), total, seconds(s.Lease), from.at, from.id, pq.Array(locations)); err != nil {
			return err
		}
		last := claimKey{}
		for _, r := range rows {
			if key := (claimKey{r.NextAttemptAt, r.ID}); key.after(last) {
				last = key
			}
			out[r.K-1] = append(out[r.K-1], r.Operation)
			want[r.K-1]--
		}
		marks.scanned(k, scope, last, head, now)
		return nil
	}
	// An unknown site leases nothing; it is an input error only then (a claim that got
	// operations proves the site exists), so it costs a statement only when there is no work.
	checkSite := func(q queryer) error {
		if site == "" {
			return nil
		}
		for _, ops := range out {
			if len(ops) > 0 {
				return nil
			}
		}
		return s.checkSite(ctx, q, site)
	}
	if len(kinds) == 1 {
		if err := claimKind(st, kinds[0], marks); err != nil {
			return nil, err
		}
		if err := checkSite(s.DB); err != nil {
			return nil, err
		}
		return out, nil
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		for i := range reqs {
			out[i], want[i] = out[i][:0], int64(reqs[i].Max)
		}
		stmt := tx.StmtxContext(ctx, st)
		for _, k := range kinds {
			// From the head: marks move only with what committed (this transaction may roll back).
			if err := claimKind(stmt, k, nil); err != nil {
				return err
			}
		}
		for _, ops := range out {
			sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
		}
		return checkSite(tx)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkSite returns a problem.FieldError (body.site) unless site names a site.
func (s *Store) checkSite(ctx context.Context, q queryer, site string) error {
	var ok bool
	if err := sqlx.GetContext(ctx, q, &ok, `SELECT EXISTS (SELECT 1 FROM sites WHERE name = $1)`, site); err != nil {
		return err
	}
	if !ok {
		return problem.Field("body.site", "no such site", site)
	}
	return nil
}

// claimKey is an operation's place in claim order, (next_attempt_at, id).
type claimKey struct {
	at time.Time
	id int64
}

func (k claimKey) after(o claimKey) bool { return k.at.After(o.at) || k.at.Equal(o.at) && k.id > o.id }

// claimHeadEvery is how often a Claimer's claims of one kind and site scan from the head of the
// claim order all the same (see claimMarks).
const claimHeadEvery = time.Second

// claimMarks remembers, per kind and site, the last operation a Claimer leased in claim order, so
// that its next claim starts its scan there instead of at the head. The head of the partial
// index operations_claim is where every claimed operation leaves an index entry that only VACUUM
// removes: after 56,000 claims a claim of 20 from the head read 279 index pages (7.9 ms), from the
// mark 4 (0.5 ms). What the mark passes over is what was claimed, and what became due before it
// but committed after it (a planner transaction that started earlier, a claim of another replica
// that rolled back): a claim from the head at least every claimHeadEvery leases those too. Only
// the single-kind statements outside a transaction use marks (they commit as they return).
type claimMarks struct {
	mu sync.Mutex
	m  map[string]*claimMark
}

type claimMark struct {
	last claimKey  // the last leased, in claim order
	head time.Time // when a claim last scanned from the head
}

func markID(k transfer.Kind, site string) string { return string(k) + "\x00" + site }

// start says where a claim of kind k at site begins at now: after the mark, or at the head.
func (ms *claimMarks) start(k transfer.Kind, site string, now time.Time) (claimKey, bool) {
	if ms == nil {
		return claimKey{}, true
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.m[markID(k, site)]
	if m == nil || now.Sub(m.head) >= claimHeadEvery {
		return claimKey{}, true
	}
	return m.last, false
}

// scanned records a claim of kind k at site that began at now (from the head if head) and
// leased up to last in claim order (the zero key: nothing).
func (ms *claimMarks) scanned(k transfer.Kind, site string, last claimKey, head bool, now time.Time) {
	if ms == nil {
		return
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = map[string]*claimMark{}
	}
	id := markID(k, site)
	m := ms.m[id]
	if m == nil {
		if last.at.IsZero() {
			return // marks only for what leased something: an unknown site makes none
		}
		m = &claimMark{}
		ms.m[id] = m
	}
	if head {
		m.head = now
	}
	if last.after(m.last) {
		m.last = last
	}
}

// Claimer serves concurrent claims together (a group commit, like Completer for completes): a
// claim that arrives while a round is running joins the next round, and a round serves every
// claim of the same kinds and site with one statement per kind (Store.ClaimAll) instead of one
// each. Concurrent claim statements all lock from the head of the same index and skip each
// other's rows, re-checking rows other claims changed meanwhile: with 8 movers one claim of 20
// took ~10 ms of PostgreSQL time where it takes ~1.7 ms alone. A round is still one statement
// with FOR UPDATE SKIP LOCKED, so claims at several replicas (each with its own Claimer) never
// lease one operation twice either.
type Claimer struct {
	Store *Store

	rounds groupcommit.Group[claimRound]
	marks  claimMarks
}

// claimRound is the claims of one round and, once it ran, their answers.
type claimRound struct {
	claims []*pendingClaim
}

type pendingClaim struct {
	ctx context.Context
	req transfer.ClaimRequest
	ops []transfer.Operation
	err error
}

// claimTimeout bounds one round's statements.
const claimTimeout = 30 * time.Second

// Claim leases up to req.Max operations to req.Holder, in a round with the claims waiting at the
// same time (Store.Claim has the semantics).
func (c *Claimer) Claim(ctx context.Context, req transfer.ClaimRequest) ([]transfer.Operation, error) {
	p := &pendingClaim{ctx: ctx, req: req}
	if _, err := c.rounds.Join(ctx, func(r *claimRound) { r.claims = append(r.claims, p) }, c.run); err != nil {
		return nil, err
	}
	return p.ops, p.err
}

// run serves one round: the claims of each kinds-and-site together. A claim whose caller gave up
// before the round started is left out (nothing is leased to a mover that is gone); if a
// statement for several claims fails, each of them is tried alone, so one claim's failure is
// never another's.
func (c *Claimer) run(r *claimRound) error {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	var order []string
	byKey := map[string][]*pendingClaim{}
	for _, p := range r.claims {
		if err := p.ctx.Err(); err != nil {
			p.err = err
			continue
		}
		k := claimGroup(p.req)
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], p)
	}
	for _, k := range order {
		ps := byKey[k]
		reqs := make([]transfer.ClaimRequest, len(ps))
		for i, p := range ps {
			reqs[i] = p.req
		}
		res, err := c.Store.claimAll(ctx, reqs[0].Kinds, reqs[0].Site, reqs, &c.marks)
		var input *problem.FieldError
		if err != nil && len(ps) > 1 && !errors.As(err, &input) {
			for _, p := range ps {
				var res [][]transfer.Operation
				if res, p.err = c.Store.ClaimAll(ctx, p.req.Kinds, p.req.Site, []transfer.ClaimRequest{p.req}); p.err == nil {
					p.ops = res[0]
				}
			}
			continue
		}
		for i, p := range ps {
			if err != nil {
				p.err = err
			} else {
				p.ops = res[i]
			}
		}
	}
	return nil
}
