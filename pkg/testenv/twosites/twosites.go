// Package twosites builds the two-site topology of docs/two-sites.md on one machine, for tests: a main
// site (a private PostgreSQL primary and the suite on it) and a secondary site (a streaming read
// replica of that primary made with pg_basebackup -R, its own Redis, and the services a test
// starts there with OPS_SITE_TYPE=secondary, OPS_DATABASE_URL = the replica and
// OPS_MAIN_DATABASE_URL = the primary through the WAN). Everything the secondary sends to the
// main site — the replica's WAL streaming and every service's main pool — crosses one TCP proxy,
// the WAN (in-process toxiproxy), which a test cuts and restores. The WAN also carries the one
// call the main site makes to the secondary: its site service's poll of the observatory's
// /buffer-stats (OPS_OBSERVATORY_STATUS_URL, a second proxy, ToObservatory, to the address the
// secondary's site service will listen on), cut and restored with the rest.
//
//	s := twosites.Start(t, twosites.Options{MainSkip: ..., MainEnv: ..., SecondaryEnv: ...})
//	s.StartSecondary(t, "authtoken", nil) / s.StartSecondaryRole(t, "ingest", "worker", nil)
//	s.CutWAN() / s.RestoreWAN(t) / s.SlowWAN(t, latency, resetToxicity) / s.HealWAN(t)
//	s.KillSecondary(key) / s.RestartSecondary(t, key), s.Redis.Kill() / .Start()
//	s.RestartPrimary(t), s.PauseReplay(t) / s.ResumeReplay(t), s.WaitReplicated(t, timeout)
//
// It needs root: the private clusters run as the postgres user under /var/tmp (the shared test
// cluster is never touched). It lives apart from package testenv so that only tests building the
// topology link toxiproxy.
package twosites

import (
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	_ "github.com/lib/pq" // PostgreSQL driver
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/testenv"
)

// Options adjust the topology.
type Options struct {
	// MainEnv overrides the main suite's environment (and so the secondary's defaults).
	MainEnv map[string]string
	// MainSkip are the main suite's services not to start (testenv.SuiteOptions.Skip).
	MainSkip []string
	// SecondaryEnv adds or overrides settings of every secondary-site process (Sites.Env).
	SecondaryEnv map[string]string
}

// Sites is a running two-site topology.
type Sites struct {
	Main *testenv.Suite   // the main site: the suite on the private primary
	WAN  *toxiproxy.Proxy // between the secondary and the primary
	// ToObservatory is the WAN's other direction: the main site's site service to the
	// secondary's (OPS_OBSERVATORY_STATUS_URL of the main suite).
	ToObservatory *toxiproxy.Proxy
	Replica       *sql.DB              // the test's database on the secondary's replica
	ReplicaURL    string               // its URL: the secondary's OPS_DATABASE_URL
	MainViaWAN    string               // the test's database on the primary, through the WAN
	Redis         *testenv.RedisServer // the secondary's own Redis
	// Env is the environment of a secondary-site process: the main suite's, with the site
	// settings, databases and Redis of the secondary, and OPS_<SERVICE>_URL of the services
	// started at the secondary so far.
	Env   map[string]string
	URLs  map[string]string           // base URLs of the secondary's processes, by key
	Procs map[string]*testenv.Process // the secondary's processes, by key
	specs map[string]procSpec         // how each was started, for RestartSecondary
	// siteAddr is where the secondary's site service listens (reserved at Start, as the main
	// suite's OPS_OBSERVATORY_STATUS_URL leads there through ToObservatory).
	siteAddr string
	// ReplicaCluster is the replica's PostgreSQL cluster (stop, start, pause replay).
	ReplicaCluster *Cluster
	// Primary is the main site's PostgreSQL cluster.
	Primary *Cluster
}

// Start builds the topology: primary, main suite, WAN, replica cloned through the WAN, the
// secondary's Redis. No secondary service runs yet (StartSecondary). It skips the test unless
// running as root.
func Start(t *testing.T, opts Options) *Sites {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run private PostgreSQL clusters as the postgres user")
	}
	primary := PrivatePostgres(t) // initdb defaults: wal_level=replica, replication trusted on 127.0.0.1
	t.Setenv("OPS_TEST_DATABASE_URL", primary.URL)
	s := &Sites{
		Primary:  primary,
		URLs:     map[string]string{},
		Procs:    map[string]*testenv.Process{},
		specs:    map[string]procSpec{},
		siteAddr: testenv.FreeAddr(t),
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	s.WAN = toxiproxy.NewProxy(srv, "wan", "127.0.0.1:0", "127.0.0.1:"+primary.Port)
	s.ToObservatory = toxiproxy.NewProxy(srv, "wan-observatory", "127.0.0.1:0", s.siteAddr)
	for _, p := range []*toxiproxy.Proxy{s.WAN, s.ToObservatory} {
		if err := p.Start(); err != nil {
			t.Fatalf("twosites: WAN (%s): %v", p.Name, err)
		}
		t.Cleanup(p.Stop)
	}
	vars := map[string]string{"OPS_RATE_LIMIT_PER_MINUTE": "0", "OPS_LOG_LEVEL": "warn",
		"OPS_OBSERVATORY_STATUS_URL": "http://" + s.ToObservatory.Listen + "/buffer-stats"}
	maps.Copy(vars, opts.MainEnv)
	s.Main = testenv.StartSuite(t, testenv.SuiteOptions{Env: vars, Skip: opts.MainSkip})
	_, wanPort, _ := strings.Cut(s.WAN.Listen, ":")

	// The replica, cloned and streaming through the WAN.
	dir := filepath.Join(filepath.Dir(primary.Dir), "replica")
	out, err := exec.Command("runuser", "-u", "postgres", "--", PGBin("pg_basebackup"), "-D", dir, "-R", "-X", "stream", "-c", "fast",
		"-d", "host=127.0.0.1 port="+wanPort+" user=postgres").CombinedOutput()
	if err != nil {
		t.Fatalf("twosites: pg_basebackup: %v\n%s", err, out)
	}
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	s.ReplicaCluster = &Cluster{Dir: dir, Port: port}
	s.ReplicaCluster.Ctl(t, "start", "-w")
	t.Cleanup(func() { s.ReplicaCluster.stop() })

	mainURL, err := url.Parse(s.Main.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	replicaURL, viaWAN := *mainURL, *mainURL
	replicaURL.Host, viaWAN.Host = "127.0.0.1:"+port, s.WAN.Listen
	s.ReplicaURL, s.MainViaWAN = replicaURL.String(), viaWAN.String()
	s.Replica, err = sql.Open("postgres", s.ReplicaURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Replica.Close() })
	var inRecovery bool
	if err := s.Replica.QueryRow(`SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("twosites: the replica must be a standby (in recovery: %v, error: %v)", inRecovery, err)
	}

	s.Redis = testenv.Redis(t)
	s.Env = maps.Clone(s.Main.Env)
	delete(s.Env, "OPS_OBSERVATORY_STATUS_URL") // the main site's setting; a secondary refuses it
	maps.Copy(s.Env, map[string]string{
		"OPS_SITE_TYPE": "secondary", "OPS_SITE_NAME": "observatory",
		"OPS_DATABASE_URL": s.ReplicaURL, "OPS_MAIN_DATABASE_URL": s.MainViaWAN,
		"OPS_REDIS_URL": s.Redis.URL,
		// The secondary signs session JWTs with its own key and holds only the main's public
		// keys, so the main's JWTs verify here and its own never verify at the main.
		"OPS_JWT_SIGNING_KEY_FILE":      testenv.SigningKey(t),
		"OPS_JWT_MAIN_PUBLIC_KEYS_FILE": testenv.PublicKeyFile(t, s.Main.SigningKeyFile),
	})
	maps.Copy(s.Env, opts.SecondaryEnv)
	return s
}

// procSpec is how a secondary process was started.
type procSpec struct {
	name  string            // the service (binary)
	extra map[string]string // its settings beyond Env
	args  []string
}

// StartSecondary starts service name at the secondary site with extra settings on a free
// address, waits until it is ready and returns its base URL. Services started later reach it
// (OPS_<NAME>_URL): start authtoken first, as the others verify tokens there.
func (s *Sites) StartSecondary(t *testing.T, name string, extra map[string]string, args ...string) string {
	t.Helper()
	base := s.start(t, name, procSpec{name: name, extra: extra, args: args})
	s.Env["OPS_"+strings.ToUpper(name)+"_URL"] = base
	return base
}

// StartSecondaryRole starts one role of service name (`name -role role`, e.g. ingest's api and
// worker as separate processes) at the secondary site, like StartSecondary, under the key
// name+"-"+role in URLs and Procs. It does not publish OPS_<NAME>_URL: a role is only part of the
// service, and the test decides whom to point at it.
func (s *Sites) StartSecondaryRole(t *testing.T, name, role string, extra map[string]string) string {
	t.Helper()
	return s.start(t, name+"-"+role, procSpec{name: name, extra: extra, args: []string{"-role", role}})
}

// KillSecondary kills the secondary's process key with SIGKILL (a crash) and waits for it to exit.
func (s *Sites) KillSecondary(key string) {
	s.Procs[key].Signal(os.Kill)
	_, _ = s.Procs[key].Wait(10 * time.Second)
}

// RestartSecondary starts the secondary's process key again as it was first started, on a new
// free address (URLs[key] follows), and returns its base URL.
func (s *Sites) RestartSecondary(t *testing.T, key string) string {
	t.Helper()
	return s.start(t, key, s.specs[key])
}

func (s *Sites) start(t *testing.T, key string, spec procSpec) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	if key == "site" {
		addr = s.siteAddr // where the main site's poll arrives through the WAN
	}
	vars := maps.Clone(s.Env)
	vars["OPS_"+strings.ToUpper(spec.name)+"_ADDR"] = addr
	switch spec.name {
	case "ingest":
		// The secondary's ingest reaches the main's database as the replay role only (decisions §45).
		vars["OPS_MAIN_DATABASE_USER"] = migrations.ReplayRole
	case "authtoken", "catalog", "site":
		// They make no change at the main and do not connect there (decisions §45; site sees the
		// main through ingest's report).
		delete(vars, "OPS_MAIN_DATABASE_URL")
	}
	maps.Copy(vars, spec.extra)
	p := testenv.Start(t, key+"-secondary", testenv.Binary(t, spec.name), vars, spec.args...)
	base := "http://" + addr
	testenv.WaitReady(t, p, base+"/readyz", 30*time.Second)
	s.URLs[key], s.Procs[key], s.specs[key] = base, p, spec
	return base
}

// CutWAN drops every connection through the WAN, both ways, and refuses new ones.
func (s *Sites) CutWAN() {
	s.WAN.Stop()
	s.ToObservatory.Stop()
}

// RestoreWAN listens again on the same addresses.
func (s *Sites) RestoreWAN(t *testing.T) {
	t.Helper()
	for _, p := range []*toxiproxy.Proxy{s.WAN, s.ToObservatory} {
		if err := p.Start(); err != nil {
			t.Fatalf("twosites: restore the WAN (%s): %v", p.Name, err)
		}
	}
}

// SlowWAN adds latency (± latency/6 jitter) in both directions and resets a share of the
// connections (toxicity: each new connection is reset after 2 s with that probability).
func (s *Sites) SlowWAN(t *testing.T, latency time.Duration, resetToxicity float64) {
	t.Helper()
	ms := latency.Milliseconds()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := s.WAN.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"latency-%s","type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, stream, stream, ms/2, ms/12))); err != nil {
			t.Fatalf("twosites: WAN latency: %v", err)
		}
	}
	if resetToxicity > 0 {
		if _, err := s.WAN.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"loss","type":"reset_peer","stream":"upstream","toxicity":%g,"attributes":{"timeout":2000}}`, resetToxicity))); err != nil {
			t.Fatalf("twosites: WAN resets: %v", err)
		}
	}
}

// HealWAN removes every toxic SlowWAN added.
func (s *Sites) HealWAN(t *testing.T) { s.WAN.Toxics.ResetToxics(t.Context()) }

// RestartPrimary stops the main PostgreSQL in immediate mode (a crash: every connection dropped,
// recovery at start) and starts it again.
func (s *Sites) RestartPrimary(t *testing.T) {
	t.Helper()
	s.Primary.Ctl(t, "stop", "-m", "immediate")
	s.Primary.Ctl(t, "start", "-w")
}

// PauseReplay holds the replica's WAL replay (it keeps receiving WAL), so that the secondary
// reads a lagging copy; ResumeReplay lets it go on.
func (s *Sites) PauseReplay(t *testing.T) { s.replayCtl(t, "pause") }

// ResumeReplay resumes the replica's WAL replay after PauseReplay.
func (s *Sites) ResumeReplay(t *testing.T) { s.replayCtl(t, "resume") }

func (s *Sites) replayCtl(t *testing.T, op string) {
	t.Helper()
	if _, err := s.Replica.Exec(`SELECT pg_wal_replay_` + op + `()`); err != nil {
		t.Fatalf("twosites: replay %s: %v", op, err)
	}
}

// WaitReplicated waits until the replica has replayed everything the primary has written so far.
func (s *Sites) WaitReplicated(t *testing.T, timeout time.Duration) {
	t.Helper()
	primary, err := sql.Open("postgres", s.Main.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	var lsn string
	if err := primary.QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		var done bool
		err := s.Replica.QueryRow(`SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&done)
		if err == nil && done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("twosites: the replica did not replay up to %s within %s (error: %v)", lsn, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Cluster is a private PostgreSQL cluster run as the postgres user.
type Cluster struct {
	Dir  string // its data directory
	Port string
	URL  string // its postgres database, as the postgres user
}

// Ctl runs pg_ctl on the cluster (start adds the port and loopback-only listening).
func (c *Cluster) Ctl(t *testing.T, args ...string) {
	t.Helper()
	all := append([]string{"-u", "postgres", "--", PGBin("pg_ctl"), "-D", c.Dir, "-l", filepath.Join(c.Dir, "log")}, args...)
	if args[0] == "start" {
		all = append(all, "-o", "-p "+c.Port+" -k /tmp -c listen_addresses=127.0.0.1")
	}
	out, err := exec.Command("runuser", all...).CombinedOutput()
	if err != nil {
		t.Fatalf("twosites: pg_ctl %v: %v\n%s", args, err, out)
	}
}

func (c *Cluster) stop() {
	_ = exec.Command("runuser", "-u", "postgres", "--", PGBin("pg_ctl"), "-D", c.Dir, "stop", "-m", "immediate").Run()
}

// PGBin is the path of a PostgreSQL program of the newest installed version.
func PGBin(name string) string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return name
	}
	return matches[len(matches)-1]
}

// PrivatePostgres runs a PostgreSQL cluster of the test's own (the shared one must never be
// stopped), as the postgres user, under /var/tmp; it is stopped and removed when the test ends.
func PrivatePostgres(t *testing.T) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "obsops-sites-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("runuser", "-u", "postgres", "--", PGBin("initdb"), "-D", dir+"/data", "-A", "trust", "-U", "postgres").CombinedOutput()
	if err != nil {
		t.Fatalf("twosites: initdb: %v\n%s", err, out)
	}
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	c := &Cluster{Dir: dir + "/data", Port: port, URL: "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"}
	c.Ctl(t, "start", "-w")
	t.Cleanup(c.stop)
	return c
}
