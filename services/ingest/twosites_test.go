package ingest_test

// The two-site topology (docs/architecture.md, two sites) for the ingest tests (TestTwoSitesWANCut, the site fault
// tests, the replay benchmark): pkg/testenv/twosites builds it (needs root: the private
// PostgreSQL clusters run as the postgres user); this file only adds what ingest runs on it — the
// main site's test data and token, and the secondary's ingest API and worker as separate
// processes:
//
//	ts := startTwoSites(t, twoSitesOptions{})
//	ts.CutWAN() / ts.RestoreWAN(t) / ts.SlowWAN(t, latency, resetToxicity) / ts.HealWAN(t)
//	ts.KillSecondary(secWorker) / ts.RestartSecondary(t, secWorker), ts.Redis.Kill() / .Start()
//	ts.RestartPrimary(t), ts.PauseReplay(t) / ts.ResumeReplay(t)
//	ts.main (the main site's suite, database and token), ts.secondary (the secondary's API URL),
//	ts.Replica (the secondary's replica, read-only)

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv/twosites"
)

// secWorker is the key of the secondary's ingest worker in twosites.Sites.URLs and Procs.
const secWorker = "ingest-worker"

// twoSites is the topology with a main suite (gateway, authtoken, ingest, site) on the primary
// and, at the secondary, an ingest API and an ingest worker (OPS_SITE_TYPE=secondary) whose
// traffic to the primary — the worker's replay, like the replica's streaming — crosses the WAN.
type twoSites struct {
	*twosites.Sites
	main      *env   // the main site: its suite, database, token and planned obs unit
	secondary string // the secondary's ingest API base URL
}

// twoSitesOptions tunes startTwoSites.
type twoSitesOptions struct {
	// Secondary adds or overrides settings of the secondary's ingest processes.
	Secondary map[string]string
	// Main adds or overrides settings of the main site's suite.
	Main map[string]string
}

// startTwoSites builds the topology; everything is stopped and removed at the test's end.
func startTwoSites(t *testing.T, opts twoSitesOptions) *twoSites {
	t.Helper()
	sites := twosites.Start(t, twosites.Options{
		MainEnv: opts.Main, MainSkip: []string{"transfer", "catalog"}, SecondaryEnv: opts.Secondary,
	})
	ts := &twoSites{Sites: sites, main: envFor(t, sites.Main)}
	require.Eventually(t, func() bool {
		var n int
		return ts.Replica.QueryRow(`SELECT count(*) FROM obs_units WHERE id = $1`, ts.main.obsUnit).Scan(&n) == nil && n == 1
	}, 30*time.Second, 100*time.Millisecond, "the replica never received the planned obs unit")
	ts.secondary = ts.StartSecondaryRole(t, "ingest", "api", nil)
	ts.StartSecondaryRole(t, "ingest", "worker", nil)
	return ts
}
