package site_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/pkg/testenv/twosites"
	"github.com/obsops/obsops/services/site"
)

// answer is an HTTP answer read in full, with how long it took.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
	Took   time.Duration
}

func call(t *testing.T, method, url, token string, body any) answer {
	t.Helper()
	req := testenv.Request(t, method, url, token, body)
	start := time.Now()
	r := testenv.Do(t, &http.Client{Timeout: 15 * time.Second}, req)
	return answer{Status: r.Status, Header: r.Header, Body: r.Body, Took: time.Since(start)}
}

// requireMainUnreachable checks a write refused at a secondary whose main is unreachable: 503
// problem+json naming the main site, with Retry-After, answered within 2 s.
func requireMainUnreachable(t *testing.T, a answer, what string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, a.Status, "%s: %s", what, a.Body)
	require.Equal(t, "application/problem+json", a.Header.Get("Content-Type"), what)
	require.Equal(t, database.MainRetryAfter, a.Header.Get("Retry-After"), what)
	require.Contains(t, string(a.Body), "the main site is unreachable", what)
	require.Contains(t, string(a.Body), `"type":"urn:obsops:problem:unavailable"`, what)
	require.LessOrEqual(t, a.Took, 2*time.Second, "%s took %s", what, a.Took)
	t.Logf("%s: 503 in %s", what, a.Took.Round(time.Microsecond))
}

// requireWriteAtMain checks a change a secondary site does not make (decisions §45): 409
// problem+json urn:obsops:problem:write_at_main_site saying to make it at the main site, at once
// (no connection to the main is tried), with or without the WAN.
func requireWriteAtMain(t *testing.T, a answer, what string) {
	t.Helper()
	require.Equal(t, http.StatusConflict, a.Status, "%s: %s", what, a.Body)
	require.Equal(t, "application/problem+json", a.Header.Get("Content-Type"), what)
	require.Contains(t, string(a.Body), `"type":"urn:obsops:problem:write_at_main_site"`, what)
	require.Contains(t, string(a.Body), "make it at the main site", what)
	require.Empty(t, a.Header.Get("Retry-After"), what)
	require.LessOrEqual(t, a.Took, time.Second, "%s took %s", what, a.Took)
}

// TestSecondarySiteWANCut runs authtoken, catalog, ingest and site at a secondary site (replica
// reads; only ingest writes the main, as obsops_replay, decisions §45) and cuts the WAN: API tokens
// and JWTs keep verifying and reads keep working; changes authtoken and catalog do not make (a
// source, an API token) answer 409 write_at_main_site with the WAN up or cut, and leave the main
// unchanged; ingest's direct write (finalize) answers a quick 503 while the WAN is cut; token uses
// at the secondary are counted in its Redis and never written to the main; /health is degraded (not down) during the cut and ok after; /api/site/info,
// /buffer-stats and the metrics follow; the main site's /api/site/observatory (its poll of the
// secondary's /buffer-stats across the WAN) says unreachable since the cut, keeping the last
// status, and reachable again after.
func TestSecondarySiteWANCut(t *testing.T) {
	begin := time.Now()
	ts := twosites.Start(t, twosites.Options{MainSkip: []string{"transfer"}})
	m := ts.Main
	mainDB, err := sql.Open("postgres", m.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mainDB.Close() })

	// At the main site: an observer, a source, and two service tokens (catalog reads; usage).
	observer := m.JWT(t, "obs1", "observer")
	admin := m.JWT(t, "ops-admin", "admin")
	r := call(t, http.MethodPost, m.GatewayURL+"/sources/", observer, map[string]any{"name": "Site2 source", "kind": "fixed", "ra_deg": 10.5, "dec_deg": -20.25})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var src struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &src))
	reader := m.Admin(t, "create-service-token", "--account", "reader", "--scopes", "read:sources,read:programs", "--name", "reads")
	counted := m.Admin(t, "create-service-token", "--account", "reader", "--scopes", "read:sources", "--name", "usage")
	station := m.Admin(t, "create-service-token", "--account", "weather-station", "--kind", "weather", "--scopes", "write:weather", "--name", "pwv")
	instrument := m.Admin(t, "create-service-token", "--account", "instrument", "--scopes", "write:observations,write:data,read:data", "--name", "daq",
		"--kind", "instrument", "--instruments", "1,2,3")
	var obsUnit int64
	require.NoError(t, mainDB.QueryRow(`WITH p AS (INSERT INTO observing_programs (short_name, title, pi) VALUES ('S2', 't', 'pi') RETURNING id)
		INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) SELECT p.id, 'u1', $1, 11, 600 FROM p RETURNING id`, src.ID).Scan(&obsUnit))
	var countedID int64
	require.NoError(t, mainDB.QueryRow(`SELECT id FROM api_tokens WHERE name = 'usage'`).Scan(&countedID))
	ts.WaitReplicated(t, 30*time.Second)

	// The secondary site's services: authtoken first (the others verify tokens there).
	auth := ts.StartSecondary(t, "authtoken", nil)
	catalog := ts.StartSecondary(t, "catalog", nil)
	ingestURL := ts.StartSecondary(t, "ingest", nil, "-role", "all")
	siteURL := ts.StartSecondary(t, "site", nil)
	t.Logf("two sites up in %s", time.Since(begin).Round(time.Millisecond))

	var h site.Health
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Status == site.StatusOK
	}, 10*time.Second, 200*time.Millisecond, "the secondary is healthy before the cut: %+v", h)
	require.NotContains(t, h.Services, "transfer", "transfer does not run at a secondary site")
	require.NotNil(t, h.Main)
	require.True(t, h.Main.Reachable)
	require.NotNil(t, h.Replica)
	require.True(t, h.Replica.InRecovery)

	// The main site sees the observatory through the WAN (its gateway routes the question).
	var obs site.ObservatoryStatus
	observatory := func() site.ObservatoryStatus {
		t.Helper()
		var o site.ObservatoryStatus
		require.Equal(t, 200, get(t, m.GatewayURL+"/api/site/observatory", &o))
		return o
	}
	require.Eventually(t, func() bool { obs = observatory(); return obs.Reachable },
		2*site.ObservatoryPollInterval+time.Second, 100*time.Millisecond, "the main site reaches the observatory: %+v", obs)
	require.NotNil(t, obs.Status)
	require.Equal(t, "observatory", obs.Status.Site)
	require.Equal(t, "secondary", obs.Status.SiteType)
	require.True(t, obs.Status.MainDBReachable)
	require.Nil(t, obs.UnreachableSince)
	require.NotNil(t, obs.LastSeen)
	var none struct{ Status int }
	require.Equal(t, 404, get(t, siteURL+"/api/site/observatory", &none), "a secondary watches no observatory")

	// Changes authtoken and catalog do not make at a secondary: refused, the WAN up, nothing at the main.
	requireWriteAtMain(t, call(t, http.MethodPost, catalog+"/sources/", observer,
		map[string]any{"name": "at the secondary", "kind": "fixed", "ra_deg": 1, "dec_deg": 2}), "create a source")
	requireWriteAtMain(t, call(t, http.MethodPost, auth+"/api/tokens", observer,
		map[string]any{"name": "at the secondary", "scopes": []string{"read:sources"}}), "create an API token")
	requireWriteAtMain(t, call(t, http.MethodPost, siteURL+"/api/site/weather", station, map[string]any{"items": []map[string]any{
		{"kind": "measurement", "time": time.Now().UTC().Format(time.RFC3339), "pwv_mm": 0.7, "source": "at the secondary"}}}), "store a PWV reading")
	var refusedRows int
	require.NoError(t, mainDB.QueryRow(`SELECT (SELECT count(*) FROM sources WHERE name = 'at the secondary') +
		(SELECT count(*) FROM api_tokens WHERE name = 'at the secondary') +
		(SELECT count(*) FROM site_weather WHERE source = 'at the secondary')`).Scan(&refusedRows))
	require.Zero(t, refusedRows, "the main is unchanged")

	// Uses of the counted token at the secondary stay in its Redis: no flush to the main (§45).
	use := func(n int) {
		for range n {
			a := call(t, http.MethodGet, auth+"/auth/me", counted, nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		}
	}
	committed := func() int64 {
		var n int64
		require.NoError(t, mainDB.QueryRow(`SELECT usage_count FROM api_tokens WHERE id = $1`, countedID).Scan(&n))
		return n
	}
	use(3)

	ts.CutWAN()
	cutAt := time.Now()
	t.Log("WAN cut")

	// Reads and both credential kinds keep working at the secondary.
	for _, tok := range []string{reader, observer} {
		a := call(t, http.MethodGet, fmt.Sprintf("%s/sources/%d", catalog, src.ID), tok, nil)
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		require.Contains(t, string(a.Body), "Site2 source")
	}
	a := call(t, http.MethodGet, catalog+"/sources/?limit=10", reader, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)

	// Changes made at the main only: the same 409, every time, with no wait on the cut WAN.
	for i := range 3 {
		requireWriteAtMain(t, call(t, http.MethodPost, catalog+"/sources/", observer,
			map[string]any{"name": fmt.Sprintf("during cut %d", i), "kind": "fixed", "ra_deg": 1, "dec_deg": 2}), "create a source")
		requireWriteAtMain(t, call(t, http.MethodPost, auth+"/api/tokens", observer,
			map[string]any{"name": fmt.Sprintf("during cut %d", i), "scopes": []string{"read:sources"}}), "create an API token")
	}

	// Ingest: buffered writes are acknowledged; its direct write (finalize) needs the main.
	a = call(t, http.MethodPost, ingestURL+"/executed_obs_units/start", instrument,
		map[string]any{"obs_unit_id": obsUnit, "instrument_module_id": 11, "start_time": "2026-11-25T01:00:00Z"})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	var started struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(a.Body, &started))
	a = call(t, http.MethodPost, ingestURL+"/raw_data_package/", instrument,
		map[string]any{"executed_obs_unit_id": started.ID, "instrument_module_id": 11, "name": "pkg-during-cut"})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), `"status":"buffered"`)
	var pkg struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(a.Body, &pkg))
	finalize := map[string]any{"size_bytes": 99, "checksum": "xxh64:0123456789abcdef"}
	requireMainUnreachable(t, call(t, http.MethodPut, ingestURL+"/raw_data_package/"+pkg.ID+"/finalize", instrument, finalize), "finalize a package")

	// Token uses during the cut: answered, counted at the secondary, not at the main.
	use(25)
	var usage struct {
		UsageCount  int64 `json:"usage_count"`
		PendingUses int64 `json:"pending_uses"`
	}
	a = call(t, http.MethodGet, fmt.Sprintf("%s/api/tokens/%d/usage", auth, countedID), admin, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.NoError(t, json.Unmarshal(a.Body, &usage))
	require.EqualValues(t, 28, usage.UsageCount, "exact in real time at the secondary: replica row + uses held in Redis")
	require.EqualValues(t, 28, usage.PendingUses, "all held at the secondary")

	// Health: degraded, not down; the main named unreachable, since the cut.
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Status == site.StatusDegraded && h.Main != nil && !h.Main.Reachable
	}, 5*time.Second, 100*time.Millisecond, "health during the cut: %+v", h)
	require.Equal(t, "ok", h.Database.Status, "the replica answers")
	for name, c := range h.Services {
		require.Equal(t, "ok", c.Status, "%s stays ready while the WAN is cut", name)
	}
	require.WithinDuration(t, cutAt, h.Main.Since, 3*time.Second)
	require.Empty(t, h.Main.LastError, "anonymous callers see no error text")
	var info site.Info
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/api/site/info", &info) == 200 && info.Status != nil && !info.Status.Main.Reachable &&
			info.Status.Main.UnreachableSeconds > 0
	}, 2*site.SampleInterval+time.Second, 100*time.Millisecond, "info during the cut: %+v", info.Status)
	require.Equal(t, "secondary", info.SiteType)
	require.NotNil(t, info.Status.Replica)
	require.NotNil(t, info.Status.Buffer)
	var st site.BufferStats
	require.Equal(t, 200, get(t, siteURL+"/buffer-stats", &st))
	require.False(t, st.MainDBReachable)
	require.False(t, st.Main.Reachable)
	require.Nil(t, st.Replica.BehindMainBytes, "unknown while the main is unreachable")
	metrics := string(rawGet(t, siteURL+"/metrics", ""))
	require.Contains(t, metrics, "obsops_main_db_reachable 0")
	require.Contains(t, metrics, "obsops_site_replica_lag_bytes ")
	require.Zero(t, committed(), "nothing of the secondary's uses reaches the main")

	// The main site: the observatory unreachable since the cut, its last status kept.
	require.Eventually(t, func() bool { obs = observatory(); return !obs.Reachable },
		2*site.ObservatoryPollInterval+time.Second, 100*time.Millisecond, "the observatory unreachable from the main: %+v", obs)
	require.NotNil(t, obs.UnreachableSince)
	require.WithinDuration(t, cutAt, *obs.UnreachableSince, site.ObservatoryPollInterval+time.Second)
	require.False(t, obs.UnreachableSince.Before(cutAt), "not before the cut")
	require.NotNil(t, obs.LastSeen)
	require.True(t, obs.LastSeen.Before(*obs.UnreachableSince))
	require.NotNil(t, obs.Status, "the last status is kept")
	require.Equal(t, "observatory", obs.Status.Site)
	require.True(t, obs.Status.MeasuredAt.Before(cutAt.Add(time.Second)), "and is the one from before the cut")
	t.Logf("main site: observatory unreachable since %s (cut at %s)", obs.UnreachableSince.Format("15:04:05.000"), cutAt.UTC().Format("15:04:05.000"))

	ts.RestoreWAN(t)
	t.Logf("%s: WAN restored", time.Since(begin).Round(time.Millisecond))

	// Health back to ok; ingest's direct write works again, catalog's changes stay refused.
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Status == site.StatusOK && h.Main.Reachable
	}, 10*time.Second, 200*time.Millisecond, "health after the cut: %+v", h)
	requireWriteAtMain(t, call(t, http.MethodPost, catalog+"/sources/", observer,
		map[string]any{"name": "after cut", "kind": "fixed", "ra_deg": 3, "dec_deg": 4}), "create a source after the cut")
	require.Eventually(t, func() bool {
		a := call(t, http.MethodPut, ingestURL+"/raw_data_package/"+pkg.ID+"/finalize", instrument, finalize)
		return a.Status == http.StatusOK && strings.Contains(string(a.Body), `"status":"complete"`)
	}, 5*time.Second, 200*time.Millisecond, "finalize at the secondary after the WAN returned")
	var status string
	require.NoError(t, mainDB.QueryRow(`SELECT status FROM raw_data_packages WHERE id = $1`, pkg.ID).Scan(&status))
	require.Equal(t, "complete", status, "finalized at the main")
	var n int
	require.NoError(t, mainDB.QueryRow(`SELECT count(*) FROM sources WHERE name LIKE 'during cut%'`).Scan(&n))
	require.Zero(t, n, "a refused write left nothing behind")
	time.Sleep(1500 * time.Millisecond)
	require.Zero(t, committed(), "the secondary's token uses stay at the secondary (no flush to the main)")
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/api/site/info", &info) == 200 && info.Status != nil && info.Status.Main.Reachable &&
			info.Status.Replica != nil && info.Status.Replica.BehindMainBytes != nil
	}, 2*site.SampleInterval+time.Second, 100*time.Millisecond, "info after the cut: %+v", info.Status)
	require.Equal(t, 200, get(t, siteURL+"/buffer-stats", &st))
	require.True(t, st.MainDBReachable)
	metrics = string(rawGet(t, siteURL+"/metrics", ""))
	require.Contains(t, metrics, "obsops_main_db_reachable 1")
	require.True(t, strings.Contains(metrics, "obsops_main_db_unreachable_seconds 0"), "reset once reachable")
	require.Eventually(t, func() bool { obs = observatory(); return obs.Reachable && obs.Status.MainDBReachable },
		2*site.ObservatoryPollInterval+time.Second, 100*time.Millisecond, "the observatory reachable from the main again: %+v", obs)
	require.Nil(t, obs.UnreachableSince)
	require.True(t, obs.LastSeen.After(cutAt))

	// site sees the main only through ingest's report: with ingest stopped the main counts as
	// unreachable (an admin reads why), and with ingest back as reachable again.
	ts.KillSecondary("ingest")
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Status == site.StatusDegraded && !h.Main.Reachable
	}, database.MainReportTTL+2*site.SampleInterval+time.Second, 200*time.Millisecond, "health without ingest: %+v", h)
	a = call(t, http.MethodGet, siteURL+"/health", admin, nil)
	require.Contains(t, string(a.Body), "no current report of the main database from ingest")
	ingestURL = ts.RestartSecondary(t, "ingest") // on a new address: site's readiness check of ingest still fails
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Main != nil && h.Main.Reachable
	}, 10*time.Second, 200*time.Millisecond, "the main with ingest back: %+v", h.Main)

	// The worst WAN: traffic silently dropped, connections left open. ingest's direct writes still
	// answer the 503 within 2 s (OPS_MAIN_DB_TIMEOUT, 1.5 s, on the first; at once after), never hang.
	_, err = ts.WAN.Toxics.AddToxicJson(strings.NewReader(`{"name":"drop","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`))
	require.NoError(t, err)
	for range 3 {
		requireMainUnreachable(t, call(t, http.MethodPut, ingestURL+"/raw_data_package/"+pkg.ID+"/finalize", instrument, finalize),
			"finalize a package, WAN dropping")
	}
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/health", &h) == 200 && h.Status == site.StatusDegraded && h.Main != nil && !h.Main.Reachable
	}, 5*time.Second, 100*time.Millisecond, "health while the WAN drops traffic: %+v", h)
	t.Logf("%s: done", time.Since(begin).Round(time.Millisecond))
}

// TestRevocationReachesSecondary: an API token revoked at the main site (WAN up) is refused at the
// secondary within the bound the secondary's /buffer-stats states (revocation_bound_s: its
// authtoken's record cache + OPS_TOKEN_CACHE_TTL + the replica's lag), although it was cached
// there (the secondary's Redis and the catalog's in-process cache) when it was revoked.
func TestRevocationReachesSecondary(t *testing.T) {
	ts := twosites.Start(t, twosites.Options{MainSkip: []string{"transfer"}})
	m := ts.Main
	mainDB, err := sql.Open("postgres", m.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mainDB.Close() })
	reader := m.Admin(t, "create-service-token", "--account", "reader", "--scopes", "read:sources", "--name", "revoked")
	var id int64
	require.NoError(t, mainDB.QueryRow(`SELECT id FROM api_tokens WHERE name = 'revoked'`).Scan(&id))
	ts.WaitReplicated(t, 30*time.Second)
	ts.StartSecondary(t, "authtoken", nil)
	catalog := ts.StartSecondary(t, "catalog", nil)
	ts.StartSecondary(t, "ingest", nil, "-role", "all") // site sees the main through ingest's report (§45)
	siteURL := ts.StartSecondary(t, "site", nil)

	read := func(base string) answer { return call(t, http.MethodGet, base+"/sources/?limit=1", reader, nil) }
	for range 5 { // verified at the secondary, and cached there
		a := read(catalog)
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	}
	var st site.BufferStats
	require.Eventually(t, func() bool {
		return get(t, siteURL+"/buffer-stats", &st) == 200 && st.RevocationBoundS != nil
	}, 10*time.Second, 100*time.Millisecond, "the secondary states its revocation bound")
	var mainSt site.BufferStats
	require.Equal(t, 200, get(t, m.URLs["site"]+"/buffer-stats", &mainSt))
	require.NotNil(t, mainSt.RevocationBoundS)
	require.InDelta(t, 1.0, *mainSt.RevocationBoundS, 1e-9, "at the main site: OPS_TOKEN_CACHE_TTL")
	require.GreaterOrEqual(t, *st.RevocationBoundS, 2.0, "at the secondary: its record cache (1 s) + OPS_TOKEN_CACHE_TTL (1 s) + lag")

	r := call(t, http.MethodDelete, fmt.Sprintf("%s/api/tokens/%d", m.GatewayURL, id), m.JWT(t, "ops-admin", "admin"), nil)
	require.Less(t, r.Status, 300, "%s", r.Body)
	revoked := time.Now()
	require.Equal(t, http.StatusUnauthorized, read(m.GatewayURL).Status, "refused at the main at once")

	for {
		a := read(catalog)
		if a.Status == http.StatusUnauthorized {
			break
		}
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		require.Less(t, time.Since(revoked), 30*time.Second, "still accepted at the secondary")
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(revoked)
	require.Equal(t, 200, get(t, siteURL+"/buffer-stats", &st))
	require.NotNil(t, st.RevocationBoundS)
	bound := time.Duration(*st.RevocationBoundS * float64(time.Second))
	t.Logf("revoked at the main: refused at the secondary after %s (bound %s)", took.Round(time.Millisecond), bound)
	require.LessOrEqual(t, took, bound+100*time.Millisecond, "refused within the stated bound (+ the polling's spacing)")
}
