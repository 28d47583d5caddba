package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/ingest"
)

// Two-site fault tests (docs/architecture.md, two sites; issue 15). One scenario, run short in `make test`
// (TestSitesFaults, about a minute and a half) and long in `make chaos` (TestChaosSites, about 25
// minutes): an instrument simulator registers observations at the secondary at a steady rate —
// start, files one by one, finish, a package of the files — while the faults follow one another:
//
//  1. WAN down (OPS_SITES_OUTAGE: 10 min in chaos), with bulk registrations piling up a backlog;
//  2. WAN up, and during the replay the secondary's ingest worker and its Redis killed (kill -9),
//     restarted (Redis from its AOF);
//  3. WAN down again briefly, then during the replay the main PostgreSQL restarted (stop -m
//     immediate, start);
//  4. WAN flapping: down/up every OPS_SITES_FLAP_PERIOD (20 s) for OPS_SITES_FLAP (5 min);
//  5. WAN slow: 300 ms round trip and 5% of connections reset, for OPS_SITES_SLOW (3 min);
//  6. the replica falling behind (replay paused for OPS_SITES_LAG, 1 min): the records committed
//     meanwhile read "committed" from the secondary's cache until it catches up.
//
// A reader polls the secondary throughout: every acknowledged execution, the newest and some
// random packages (with their files) and files: never a 404 or a record missing from a list, never
// a status going backwards; other failures (503) are expected while the secondary's Redis or the
// main PostgreSQL is down, and allowed for at most 1% of the reads otherwise (a loaded machine).
// At the end the instrument's acknowledged-id log is checked at the MAIN database: 0 lost, 0
// duplicated (phantoms — written, the answer lost — reported), no dead letters, and the
// secondary's cache empty once everything is replicated.

// sitePhases are the scenario's durations and rates.
type sitePhases struct {
	outage, flap, flapPeriod, slow, lag time.Duration
	rate                                int // files per second, one request each
	filesPerObs                         int // files per observation (then finish and package)
	backlog                             int // files registered in 1,000-file bulks during each outage
	drain                               time.Duration
}

// sitePhasesFor returns the short (make test) or long (make chaos) scenario; each duration can be
// set with OPS_SITES_OUTAGE, OPS_SITES_FLAP, OPS_SITES_FLAP_PERIOD, OPS_SITES_SLOW, OPS_SITES_LAG
// (Go durations: 90s, 10m).
func sitePhasesFor(t *testing.T, long bool) sitePhases {
	p := sitePhases{outage: 4 * time.Second, flap: 6 * time.Second, flapPeriod: 2 * time.Second, slow: 4 * time.Second,
		lag: 3 * time.Second, rate: 40, filesPerObs: 20, backlog: 8000, drain: 3 * time.Minute}
	if long {
		p = sitePhases{outage: 10 * time.Minute, flap: 5 * time.Minute, flapPeriod: 40 * time.Second, slow: 3 * time.Minute,
			lag: time.Minute, rate: 20, filesPerObs: 100, backlog: 20000, drain: 10 * time.Minute}
	}
	for name, d := range map[string]*time.Duration{"OPS_SITES_OUTAGE": &p.outage, "OPS_SITES_FLAP": &p.flap,
		"OPS_SITES_FLAP_PERIOD": &p.flapPeriod, "OPS_SITES_SLOW": &p.slow, "OPS_SITES_LAG": &p.lag} {
		if v := os.Getenv(name); v != "" {
			x, err := time.ParseDuration(v)
			require.NoError(t, err, name)
			*d = x
		}
	}
	return p
}

// TestSitesFaults is the short two-site fault scenario (make test).
func TestSitesFaults(t *testing.T) {
	if os.Getenv("OPS_CHAOS") == "1" {
		t.Skip("make chaos runs the long version (TestChaosSites)")
	}
	runSiteFaults(t, sitePhasesFor(t, false))
}

// TestChaosSites is the long two-site fault scenario (make chaos).
func TestChaosSites(t *testing.T) {
	chaos(t)
	runSiteFaults(t, sitePhasesFor(t, true))
}

func runSiteFaults(t *testing.T, p sitePhases) {
	begin := time.Now()
	ts := startTwoSites(t, twoSitesOptions{Secondary: map[string]string{"OPS_INGEST_REDIS_TIMEOUT": "500ms"}})
	e := ts.main
	logf := func(format string, args ...any) {
		t.Logf("%7.1fs "+format, append([]any{time.Since(begin).Seconds()}, args...)...)
	}
	logf("two sites up; phases %+v", p)
	in := &instrument{base: ts.secondary, token: e.token, ou: e.obsUnit, c: &http.Client{Timeout: 10 * time.Second},
		files: map[string]string{}, execs: map[string]bool{}, pkgs: map[string][]string{}}
	rd := &secReader{in: in, last: map[string]string{}, begin: begin}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); in.run(ctx, p.rate, p.filesPerObs) }()
	go func() { defer wg.Done(); rd.run(ctx) }()
	time.Sleep(2 * time.Second)

	// backlogged waits until at least part of the backlog is at the main primary (the replay is
	// under way) or all of it, and says which.
	atMain := func(prefix string) int {
		return e.count(t, `SELECT count(*) FROM raw_data_files WHERE path LIKE $1`, prefix+"%")
	}
	duringReplay := func(prefix string, total int) string {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			switch n := atMain(prefix); {
			case n > 0 && n < total:
				return fmt.Sprintf("replay under way: %d of %d backlog files at the main site", n, total)
			case n >= total:
				return "the backlog had already drained"
			}
			time.Sleep(20 * time.Millisecond)
		}
		return "the replay had not started"
	}

	// 1. WAN down, a backlog piles up.
	ts.CutWAN()
	cut := time.Now()
	logf("1. WAN down for %s", p.outage)
	n := in.bulk(ctx, "sites/backlog1/", p.backlog)
	time.Sleep(time.Until(cut.Add(p.outage)))
	require.Zero(t, atMain("sites/backlog1/"), "nothing may cross a cut WAN")
	ts.RestoreWAN(t)
	logf("   WAN up; %d backlog files acknowledged during the outage", n)

	// 2. The secondary's worker and Redis killed during the replay.
	logf("2. %s: killing the secondary's worker and Redis (kill -9)", duringReplay("sites/backlog1/", n))
	rd.fault(true)
	ts.KillSecondary(secWorker)
	ts.Redis.Kill()
	time.Sleep(time.Second)
	ts.Redis.Start()
	ts.RestartSecondary(t, secWorker)
	rd.fault(false)
	logf("   Redis (from its AOF) and the worker restarted")

	// 3. The main PostgreSQL restarted during a replay.
	ts.CutWAN()
	time.Sleep(2 * time.Second)
	n = in.bulk(ctx, "sites/backlog2/", p.backlog)
	ts.RestoreWAN(t)
	logf("3. %s: restarting the main PostgreSQL (immediate)", duringReplay("sites/backlog2/", n))
	rd.fault(true)
	ts.RestartPrimary(t)
	rd.fault(false)
	logf("   main PostgreSQL back")

	// 4. WAN flapping.
	logf("4. WAN flapping every %s for %s", p.flapPeriod/2, p.flap)
	for end := time.Now().Add(p.flap); time.Now().Before(end); {
		ts.CutWAN()
		time.Sleep(p.flapPeriod / 2)
		ts.RestoreWAN(t)
		time.Sleep(p.flapPeriod / 2)
	}

	// 5. WAN slow and lossy.
	logf("5. WAN slow (300 ms round trip, 5%% of connections reset) for %s", p.slow)
	ts.SlowWAN(t, 300*time.Millisecond, 0.05)
	time.Sleep(p.slow)
	ts.HealWAN(t)

	// 6. The replica falls behind: what commits meanwhile stays cached, "committed".
	logf("6. replica replay paused for %s", p.lag)
	ts.PauseReplay(t)
	time.Sleep(time.Second) // what was acknowledged before may have been replayed already
	mark := in.ackedCount()
	time.Sleep(p.lag)
	lagged := in.ackedSince(mark)
	require.NotEmpty(t, lagged, "the instrument registered nothing while the replica lagged")
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM raw_data_files WHERE id = ANY($1::uuid[])`, pq.StringArray(lagged)) == len(lagged)
	}, p.drain, 200*time.Millisecond, "files registered while the replica lagged never reached the main site")
	var onReplica int
	require.NoError(t, ts.Replica.QueryRow(`SELECT count(*) FROM raw_data_files WHERE id = ANY($1::uuid[])`, pq.StringArray(lagged)).Scan(&onReplica))
	require.Zero(t, onReplica, "replay is paused: the replica must not have them")
	for _, id := range lagged[:min(len(lagged), 20)] {
		r := doURL(t, in.c, http.MethodGet, ts.secondary+"/raw_data_files/"+id, e.token, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var f secFile
		r.json(t, &f)
		require.Equal(t, "committed", f.BufferStatus, "in the main primary, kept in the secondary's cache")
	}
	ts.ResumeReplay(t)
	logf("   %d files committed and cached while the replica lagged; replay resumed", len(lagged))
	time.Sleep(2 * time.Second)

	stop()
	wg.Wait()
	logf("load stopped: %s", in.summary())

	// Everything acknowledged reaches the main site, once, and leaves the secondary's cache.
	files, execs, pkgs := in.snapshot()
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM raw_data_files WHERE id = ANY($1::uuid[])`, pq.StringArray(keys(files))) == len(files) &&
			e.count(t, `SELECT count(*) FROM executed_obs_units WHERE id = ANY($1::uuid[]) AND start_tx IS NOT NULL`, pq.StringArray(keys(execs))) == len(execs) &&
			e.count(t, `SELECT count(*) FROM raw_data_packages WHERE id = ANY($1::uuid[])`, pq.StringArray(keys(pkgs))) == len(pkgs)
	}, p.drain, time.Second, "not everything acknowledged reached the main site")
	logf("everything acknowledged is at the main site")
	rows, err := e.db.Query(`SELECT id::text, path FROM raw_data_files WHERE path LIKE 'sites/%'`)
	require.NoError(t, err)
	inDB, perPath := map[string]bool{}, map[string]int{}
	for rows.Next() {
		var id, path string
		require.NoError(t, rows.Scan(&id, &path))
		inDB[id] = true
		perPath[path]++
	}
	require.NoError(t, rows.Err())
	rows.Close()
	var lost, dup, phantom int
	for id, path := range files {
		if !inDB[id] {
			lost++
		}
		if perPath[path] > 1 {
			dup++
		}
	}
	for id := range inDB {
		if _, ok := files[id]; !ok {
			phantom++
		}
	}
	logf("verdict at the main site: %d files, %d executions, %d packages acknowledged: lost %d, duplicated %d, phantom %d (allowed)",
		len(files), len(execs), len(pkgs), lost, dup, phantom)
	require.Zero(t, lost, "acknowledged files lost")
	require.Zero(t, dup, "files registered twice")
	for id, fids := range pkgs {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM raw_data_package_files WHERE package_id = $1`, id).Scan(&n))
		require.Equal(t, len(fids), n, "package %s lists its files", id)
	}
	rdb := ts.Redis.Client()
	require.Eventually(t, func() bool {
		return len(rdb.Keys(context.Background(), "ingest:rec:*").Val()) == 0
	}, p.drain, time.Second, "replicated records must leave the secondary's cache")
	require.Zero(t, rdb.ZCard(context.Background(), "asynq:{ingest}:archived").Val(), "an outage never makes dead letters")

	rd.mu.Lock()
	logf("reader: %d rounds, %d reads at the secondary; %d failed inside fault windows (tolerated), %d outside them (%v); records missed: %v",
		rd.polls, rd.reads, rd.tolerated, rd.nblips, rd.blips, rd.bad)
	require.Empty(t, rd.bad, "a read at the secondary missed an acknowledged record")
	require.Greater(t, rd.polls, 10)
	require.LessOrEqual(t, rd.nblips*100, rd.reads, "more than 1% of the reads failed outside the fault windows")
	rd.mu.Unlock()
	require.Empty(t, in.failures(), "the instrument got answers it must never get")
	testenv.RequireInvariants(t, e.s.DatabaseURL)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// instrument simulates an instrument script at the secondary site: client-chosen ids, every
// request retried until it is acknowledged (201), as the Python client in docs/api-guide.md does.
type instrument struct {
	base, token string
	ou          int64
	c           *http.Client

	mu    sync.Mutex
	files map[string]string   // acknowledged file id → path
	order []string            // acknowledged file ids in order
	execs map[string]bool     // acknowledged executions
	pkgs  map[string][]string // acknowledged package → its files
	open  []string            // acknowledged files of the running observation (not packaged yet)
	bad   []string            // answers that must never come (4xx other than 429)
	tries int                 // requests sent
}

// send retries the request until 201 or ctx ends; it reports whether it was acknowledged.
func (in *instrument) send(ctx context.Context, method, path string, body any) bool {
	for ctx.Err() == nil {
		req := requestFor(method, in.base+path, in.token, body)
		resp, err := in.c.Do(req.WithContext(ctx))
		in.mu.Lock()
		in.tries++
		in.mu.Unlock()
		if err == nil {
			drain(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusCreated:
				return true
			case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
				in.mu.Lock()
				if len(in.bad) < 10 {
					in.bad = append(in.bad, fmt.Sprintf("%s %s: %d", method, path, resp.StatusCode))
				}
				in.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// run registers observations at rate files a second until ctx ends.
func (in *instrument) run(ctx context.Context, rate, filesPerObs int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for obs := 0; ctx.Err() == nil; obs++ {
		eou := ingest.NewID()
		start := startBody(in.ou)
		start["id"] = eou
		if !in.send(ctx, http.MethodPost, "/executed_obs_units/start", start) {
			return
		}
		in.mu.Lock()
		in.execs[eou], in.open = true, nil
		in.mu.Unlock()
		for i := range filesPerObs {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id, path := ingest.NewID(), fmt.Sprintf("sites/obs%05d/%04d.fits", obs, i)
			f := fileBody(eou, path)
			f["id"] = id
			if !in.send(ctx, http.MethodPost, "/raw_data_files/", f) {
				return
			}
			in.mu.Lock()
			in.files[id], in.order, in.open = path, append(in.order, id), append(in.open, id)
			in.mu.Unlock()
		}
		if !in.send(ctx, http.MethodPut, "/executed_obs_units/"+eou+"/finish", map[string]any{"end_time": "2026-11-25T02:00:00Z", "status": "completed"}) {
			return
		}
		in.mu.Lock()
		fids := slices.Clone(in.open)
		in.mu.Unlock()
		pkg := ingest.NewID()
		body := map[string]any{"id": pkg, "executed_obs_unit_id": eou, "instrument_module_id": 11, "name": fmt.Sprintf("obs%05d", obs), "file_ids": fids}
		if !in.send(ctx, http.MethodPost, "/raw_data_package/", body) {
			return
		}
		in.mu.Lock()
		in.pkgs[pkg], in.open = fids, nil
		in.mu.Unlock()
	}
}

// bulk registers n files under prefix in 1,000-file requests (an observation of its own) and
// returns how many were acknowledged.
func (in *instrument) bulk(ctx context.Context, prefix string, n int) int {
	eou := ingest.NewID()
	start := startBody(in.ou)
	start["id"] = eou
	if !in.send(ctx, http.MethodPost, "/executed_obs_units/start", start) {
		return 0
	}
	in.mu.Lock()
	in.execs[eou] = true
	in.mu.Unlock()
	acked := 0
	for done := 0; done < n; done += 1000 {
		var files []any
		ids := map[string]string{}
		for i := done; i < min(done+1000, n); i++ {
			f := fileBody(eou, fmt.Sprintf("%s%06d.fits", prefix, i))
			f["id"] = ingest.NewID()
			ids[f["id"].(string)] = f["path"].(string)
			files = append(files, f)
		}
		if !in.send(ctx, http.MethodPost, "/raw_data_files/bulk", map[string]any{"files": files}) {
			break
		}
		in.mu.Lock()
		for id, path := range ids {
			in.files[id], in.order = path, append(in.order, id)
		}
		in.mu.Unlock()
		acked += len(ids)
	}
	return acked
}

func (in *instrument) ackedCount() int { in.mu.Lock(); defer in.mu.Unlock(); return len(in.order) }

func (in *instrument) ackedSince(mark int) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.order[mark:])
}

func (in *instrument) snapshot() (files map[string]string, execs map[string]bool, pkgs map[string][]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	files, execs, pkgs = make(map[string]string, len(in.files)), make(map[string]bool, len(in.execs)), make(map[string][]string, len(in.pkgs))
	for k, v := range in.files {
		files[k] = v
	}
	for k, v := range in.execs {
		execs[k] = v
	}
	for k, v := range in.pkgs {
		pkgs[k] = v
	}
	return
}

func (in *instrument) failures() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.bad)
}

func (in *instrument) summary() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return fmt.Sprintf("%d files, %d executions, %d packages acknowledged in %d requests", len(in.files), len(in.execs), len(in.pkgs), in.tries)
}

// secReader polls the secondary for acknowledged records.
type secReader struct {
	in *instrument

	begin time.Time

	mu        sync.Mutex
	faulty    bool      // the secondary's Redis or the main PostgreSQL is down now
	faultEnd  time.Time // when the last fault window ended (a short grace follows)
	last      map[string]string
	bad       []string // a record missing (404, absent from a list) or its status stepping back
	tolerated int      // reads failed (not 404) inside fault windows
	blips     []string // reads failed (not 404) outside them: a 503 of a loaded machine
	nblips    int
	reads     int
	polls     int
}

// fault opens or closes a window in which reads may fail (never with a 404).
func (r *secReader) fault(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faulty = on
	if !on {
		r.faultEnd = time.Now()
	}
}

// check records a failed read. A 404 (a record lost) always fails the test; another failure is
// tolerated inside a fault window and otherwise counted as a blip (at most 1% of the reads may
// be: on a loaded machine a Redis round trip can exceed the secondary's 500 ms budget, a 503).
func (r *secReader) check(what string, status int, err error, sent time.Time) bool {
	if err == nil && status == http.StatusOK {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf("at %.1fs %s: %d %v", sent.Sub(r.begin).Seconds(), what, status, err)
	switch inWindow := r.faulty || sent.Before(r.faultEnd.Add(5*time.Second)); {
	case status == http.StatusNotFound:
		if len(r.bad) < 20 {
			r.bad = append(r.bad, msg)
		}
	case inWindow:
		r.tolerated++
	default:
		r.nblips++
		if len(r.blips) < 10 {
			r.blips = append(r.blips, msg)
		}
	}
	return false
}

// status records a record's buffer_status and fails if it went backwards.
func (r *secReader) status(id, s string) {
	rank := map[string]int{"buffered": 0, "committed": 1, "replicated": 2}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.last[id]; ok && rank[s] < rank[prev] && len(r.bad) < 20 {
		r.bad = append(r.bad, fmt.Sprintf("%s went from %s back to %s", id, prev, s))
	}
	r.last[id] = s
}

func (r *secReader) get(path string, v any) (int, error) {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	req := requestFor(http.MethodGet, r.in.base+path, r.in.token, nil)
	resp, err := r.in.c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return resp.StatusCode, fmt.Errorf("%s", b)
	}
	return resp.StatusCode, jsonDecode(resp.Body, v)
}

func (r *secReader) run(ctx context.Context) {
	for ctx.Err() == nil {
		r.round()
		r.mu.Lock()
		r.polls++
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// round reads, at the secondary: every acknowledged execution (the obs unit's list, page by
// page), the newest three and three random packages with their files, the files of the running
// observation and ten random files. What was acknowledged before the read began must be there.
func (r *secReader) round() {
	files, execs, pkgs := r.in.snapshot()
	r.in.mu.Lock()
	open := slices.Clone(r.in.open)
	order := r.in.order
	r.in.mu.Unlock()
	sent := time.Now()
	seen := map[string]bool{}
	for offset := 0; ; offset += 500 {
		var page struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
			Total int `json:"total"`
		}
		status, err := r.get(fmt.Sprintf("/executed_obs_units/%d?limit=500&offset=%d", r.in.ou, offset), &page)
		if !r.check("executions", status, err, sent) {
			return
		}
		for _, it := range page.Items {
			seen[it.ID] = true // (an execution's status may step back: a finish arrives buffered)
		}
		if offset+500 >= page.Total {
			break
		}
	}
	for id := range execs {
		if !seen[id] {
			r.check("execution "+id, http.StatusNotFound, nil, sent)
		}
	}
	pkgIDs := keys(pkgs)
	rand.Shuffle(len(pkgIDs), func(i, j int) { pkgIDs[i], pkgIDs[j] = pkgIDs[j], pkgIDs[i] })
	for _, id := range pkgIDs[:min(6, len(pkgIDs))] {
		var view struct {
			BufferStatus string `json:"buffer_status"`
			Files        struct {
				Items []secFile `json:"items"`
			} `json:"files"`
		}
		status, err := r.get("/raw_data_package/"+id+"?limit=500", &view)
		if !r.check("package "+id, status, err, sent) {
			continue
		}
		r.status(id, view.BufferStatus)
		listed := map[string]bool{}
		for _, f := range view.Files.Items {
			listed[f.ID] = true
			r.status(f.ID, f.BufferStatus)
		}
		for _, fid := range pkgs[id] {
			if !listed[fid] {
				r.check("file "+fid+" of package "+id, http.StatusNotFound, nil, sent)
			}
		}
	}
	sample := open
	for range 10 {
		if len(order) > 0 {
			sample = append(sample, order[rand.IntN(len(order))])
		}
	}
	for _, id := range sample {
		var f secFile
		status, err := r.get("/raw_data_files/"+id, &f)
		if r.check("file "+id, status, err, sent) {
			r.status(id, f.BufferStatus)
			if want, ok := files[id]; ok && f.Path != want { // (open may hold ids newer than the snapshot)
				r.check("file "+id+" path "+f.Path, http.StatusNotFound, nil, sent)
			}
		}
	}
}

// requestFor builds a request with a JSON body (nil: none).
func requestFor(method, url, token string, body any) *http.Request {
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	var req *http.Request
	if rd != nil {
		req, _ = http.NewRequest(method, url, rd)
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, _ = http.NewRequest(method, url, nil)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}
