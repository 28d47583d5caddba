package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the checkout this test's stack runs from (deploy/wan → ../..).
var repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))

// stack is one `make up-sites` of the test's own: its state folder, ports and environment.
type stack struct {
	t     *testing.T
	state string
	env   []string          // the process environment of every make call
	vars  map[string]string // .local/env and .local/sites.env, as a shell sees them
	ports []int             // every port the stack listens on
}

// make runs `make TARGET` in the checkout with the stack's environment.
func (s *stack) make(target string) string {
	s.t.Helper()
	cmd := exec.Command("make", "-s", "-C", repoRoot, target)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.dumpLogs()
		s.t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// dumpLogs logs the last lines of every log of both sites (after a failure).
func (s *stack) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(s.state, "*", "*.log"))
	more, _ := filepath.Glob(filepath.Join(s.state, "secondary", "*", "*.log"))
	for _, f := range append(logs, more...) {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		s.t.Logf("--- %s\n%s", f, strings.Join(lines, "\n"))
	}
}

// load reads the environment files up-sites wrote, as a shell sourcing them sees them.
func (s *stack) load() {
	s.t.Helper()
	out, err := exec.Command("bash", "-c", `set -a; . "$1"; . "$2"; set +a; env -0`, "-",
		filepath.Join(s.state, "env"), filepath.Join(s.state, "sites.env")).Output()
	if err != nil {
		s.t.Fatalf("sourcing env and sites.env: %v", err)
	}
	s.vars = map[string]string{}
	for kv := range strings.SplitSeq(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OPS_") {
			s.vars[k] = v
		}
	}
}

// freeBase picks a random port with n consecutive free ports from it, and n more at each of
// the given offsets (the stack's ports are bases plus fixed offsets). It draws from 10000–17999:
// below the ports pkg/testenv hands to concurrent tests (20000–31999) and the kernel's ephemeral
// range, and above a developer's stack (8080–9998). Ports in taken (those the stack's other
// bases picked: nothing listens on them yet) are not free; the ones picked are added to it.
func freeBase(t *testing.T, taken map[int]bool, n int, offsets ...int) int {
	t.Helper()
	for range 200 {
		r, _ := rand.Int(rand.Reader, big.NewInt(8000))
		base := 10000 + int(r.Int64())
		var ports []int
		for _, off := range append([]int{0}, offsets...) {
			for i := range n {
				ports = append(ports, base+off+i)
			}
		}
		ok := true
		for _, p := range ports {
			if taken[p] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			for _, p := range ports {
				taken[p] = true
			}
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

func newStack(t *testing.T) *stack {
	state := t.TempDir()
	taken := map[int]bool{}
	httpBase := freeBase(t, taken, 6, 100, 1000, 1100) // gateways, services and metrics of both sites
	pgBase := freeBase(t, taken, 2, 10)                // primary, replica; the WAN at +10
	redisBase := freeBase(t, taken, 2)
	devidp, wanAPI := freeBase(t, taken, 1), freeBase(t, taken, 1)
	s := &stack{t: t, state: state}
	for _, p := range []int{httpBase, httpBase + 100} {
		for i := range 6 {
			s.ports = append(s.ports, p+i)
		}
		s.ports = append(s.ports, p+1000)
	}
	s.ports = append(s.ports, pgBase, pgBase+1, pgBase+10, pgBase+11, redisBase, redisBase+1, devidp, wanAPI)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "OPS_DATABASE_URL" || k == "OPS_REDIS_URL" || strings.HasPrefix(k, "OPS_LOCAL_") || k == "MAKEFLAGS" {
			continue
		}
		s.env = append(s.env, kv)
	}
	s.env = append(s.env,
		"OPS_LOCAL_STATE="+state,
		"OPS_LOCAL_HTTP_BASE="+strconv.Itoa(httpBase),
		"OPS_LOCAL_PG_PORT="+strconv.Itoa(pgBase),
		"OPS_LOCAL_REDIS_PORT="+strconv.Itoa(redisBase),
		"OPS_LOCAL_DEVIDP_PORT="+strconv.Itoa(devidp),
		"OPS_LOCAL_WAN_API_PORT="+strconv.Itoa(wanAPI),
		"OPS_LOG_LEVEL=warn",
	)
	// `make test` built ./bin before the tests (OPS_BIN_DIR); run alone, the stack builds it.
	if bin := os.Getenv("OPS_BIN_DIR"); bin != "" {
		if abs, _ := filepath.Abs(bin); abs == filepath.Join(repoRoot, "bin") {
			s.env = append(s.env, "OPS_LOCAL_NO_BUILD=1")
		}
	}
	t.Cleanup(func() {
		// Whatever happened: both sites down, then the PostgreSQL clusters' folder removed
		// (outside the state folder when the postgres user cannot enter it).
		cmd := exec.Command("make", "-s", "-C", repoRoot, "down")
		cmd.Env = s.env
		_ = cmd.Run()
		cmd = exec.Command(filepath.Join(repoRoot, "deploy", "local", "stack.sh"), "pg-dir")
		cmd.Env = s.env
		if out, err := cmd.Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); strings.HasPrefix(dir, "/var/tmp/obsops-pg-") {
				_ = os.RemoveAll(dir)
			}
		}
	})
	return s
}

// call sends one request with the service token and decodes a JSON answer into out (if given).
func call(t *testing.T, method, url, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	if resp.StatusCode >= 300 && out != nil {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// pgTool finds a PostgreSQL client program (the stack installed PostgreSQL).
func pgTool(t *testing.T, name string) string {
	t.Helper()
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(m) == 0 {
		t.Fatalf("no %s", name)
	}
	return m[len(m)-1]
}

// alive reports whether pid is a running process (a zombie is not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// stackPids lists the processes of the stack: every pid file of both sites, the Redis servers'
// and the PostgreSQL postmasters' (primary and replica), and any process whose command line
// names the state folder or the clusters' folder or whose environment names the state folder.
func (s *stack) stackPids(pgDir string) map[int]string {
	pids := map[int]string{}
	files, _ := filepath.Glob(filepath.Join(s.state, "pids", "*.pid"))
	more, _ := filepath.Glob(filepath.Join(s.state, "secondary", "pids", "*.pid"))
	files = append(files, more...)
	files = append(files, filepath.Join(s.state, "redis", "redis.pid"), filepath.Join(s.state, "secondary", "redis", "redis.pid"),
		filepath.Join(pgDir, "data", "postmaster.pid"), filepath.Join(pgDir, "replica", "postmaster.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && alive(pid) {
			pids[pid] = f
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(p))
		if pid == os.Getpid() || !alive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		environ, _ := os.ReadFile(p + "/environ")
		if bytes.Contains(cmdline, []byte(s.state)) || bytes.Contains(cmdline, []byte(pgDir)) ||
			bytes.Contains(environ, []byte("OPS_LOCAL_STATE="+s.state+"\x00")) {
			pids[pid] = strings.ReplaceAll(string(cmdline), "\x00", " ")
		}
	}
	return pids
}

// TestUpSitesWANCut runs the two-site stack through its real scripts, on ports and in a state
// folder of its own: `make up-sites`; a service token made at the main site registers an
// execution and a file at the secondary's gateway, which reach the main; `make wan-down`; more
// files are acknowledged at the secondary (201 buffered), read back there, and absent at the
// main; `make wan-up`: all reach the main. `make wan-slow` puts its toxics on the WAN and
// `make wan-up` clears them. Finally `make down` leaves no process of either site.
func TestUpSitesWANCut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the stack runs its PostgreSQL clusters as the postgres user")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make")
	}
	begin := time.Now()
	s := newStack(t)
	s.make("up-sites")
	t.Logf("make up-sites: %s", time.Since(begin).Round(time.Millisecond))
	s.load()
	v := s.vars
	for _, k := range []string{"OPS_MAIN_GATEWAY_URL", "OPS_SECONDARY_GATEWAY_URL", "OPS_SECONDARY_DATABASE_URL",
		"OPS_SECONDARY_MAIN_DATABASE_URL", "OPS_SECONDARY_ENV_FILE", "OPS_WAN_API_URL", "OPS_MAIN_PRIMARY_DATABASE_URL"} {
		if v[k] == "" {
			t.Fatalf("sites.env has no %s", k)
		}
	}
	mainGW, secGW := v["OPS_MAIN_GATEWAY_URL"], v["OPS_SECONDARY_GATEWAY_URL"]

	// The secondary's services run as a secondary site, on the replica, with the main through the WAN.
	out, err := exec.Command("bash", "-c", `set -a; . "$1"; set +a; echo "$OPS_SITE_TYPE $OPS_DATABASE_URL $OPS_MAIN_DATABASE_URL"`,
		"-", v["OPS_SECONDARY_ENV_FILE"]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "secondary " + v["OPS_SECONDARY_DATABASE_URL"] + " " + v["OPS_SECONDARY_MAIN_DATABASE_URL"] + "\n"; string(out) != want {
		t.Fatalf("secondary env: %q, want %q", out, want)
	}
	var info struct {
		SiteType string `json:"site_type"`
	}
	if call(t, http.MethodGet, secGW+"/api/site/info", "", nil, &info); info.SiteType != "secondary" {
		t.Fatalf("the secondary's /api/site/info says site_type %q", info.SiteType)
	}
	// The main's site page sees the observatory through the WAN (OPS_OBSERVATORY_STATUS_URL):
	// reachable while it is up, "unreachable since" while it is cut.
	observatory := func(reachable bool) {
		t.Helper()
		type status struct {
			Reachable        bool       `json:"reachable"`
			UnreachableSince *time.Time `json:"unreachable_since"`
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			var st status // fresh: an answer leaves out unreachable_since once reachable
			code := call(t, http.MethodGet, mainGW+"/api/site/observatory", "", nil, &st)
			if code == http.StatusOK && st.Reachable == reachable && (reachable == (st.UnreachableSince == nil)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the main's /api/site/observatory: %d, reachable %v (unreachable since %v), want reachable %v", code, st.Reachable, st.UnreachableSince, reachable)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	observatory(true)
	psql := func(url, q string) string {
		out, err := exec.Command(pgTool(t, "psql"), url, "-tAF", " ", "-c", q).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %s: %v\n%s", q, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := psql(v["OPS_SECONDARY_DATABASE_URL"], "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("the secondary's database is not a replica (pg_is_in_recovery %s)", got)
	}
	// The replica streams through the WAN: the primary sees it coming from the WAN's side.
	if got := psql(v["OPS_MAIN_PRIMARY_DATABASE_URL"], "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'obsops_secondary'"); got != "1" {
		t.Fatalf("the primary streams to %s replicas named obsops_secondary, want 1", got)
	}

	// A service token, made at the main site (it reaches the secondary by replication).
	cmd := exec.Command("bash", "-c", `set -a; . "$1"; set +a; exec "$2" admin create-service-token --account sites-test --scopes write:observations,write:data,read:data,read:observations --name sites-test --days 1 --kind instrument --instruments 1,2,3`,
		"-", filepath.Join(s.state, "env"), filepath.Join(repoRoot, "bin", "authtoken"))
	tok, err := cmd.Output()
	if err != nil {
		t.Fatalf("create-service-token: %v", err)
	}
	token := strings.TrimSpace(string(tok))
	unit := strings.Fields(psql(v["OPS_MAIN_PRIMARY_DATABASE_URL"], "SELECT id, instrument_module_id FROM obs_units ORDER BY id LIMIT 1"))
	if len(unit) != 2 {
		t.Fatal("the demo catalogue has no obs unit")
	}
	ou, _ := strconv.Atoi(unit[0])
	module, _ := strconv.Atoi(unit[1])

	type answer struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	eou := newUUID()
	start := map[string]any{"id": eou, "obs_unit_id": ou, "instrument_module_id": module, "start_time": "2026-11-25T03:00:00Z"}
	deadline := time.Now().Add(30 * time.Second)
	for { // until the replica has the token (milliseconds)
		var a answer
		code := call(t, http.MethodPost, secGW+"/executed_obs_units/start", token, start, &a)
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusUnauthorized || time.Now().After(deadline) {
			s.dumpLogs()
			t.Fatalf("start at the secondary: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	file := func(i int) string {
		var a answer
		body := map[string]any{"executed_obs_unit_id": eou, "instrument_module_id": module, "path": fmt.Sprintf("sites-test/%03d.fits", i),
			"size_bytes": 1024, "checksum": "xxh64:0123456789abcdef"}
		if code := call(t, http.MethodPost, secGW+"/raw_data_files/", token, body, &a); code != http.StatusCreated || a.Status != "buffered" {
			t.Fatalf("file %d at the secondary: %d %q", i, code, a.Status)
		}
		return a.ID
	}
	atMain := func(ids []string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for _, id := range ids {
			for call(t, http.MethodGet, mainGW+"/raw_data_files/"+id, token, nil, nil) != http.StatusOK {
				if time.Now().After(deadline) {
					s.dumpLogs()
					t.Fatalf("file %s never reached the main site", id)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	first := file(0)
	atMain([]string{first}, 30*time.Second)
	// The secondary's ingest replays as obsops_replay, the one role it holds at the main (decisions §45).
	if got := psql(v["OPS_MAIN_PRIMARY_DATABASE_URL"], "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = 'obsops_replay'"); got != "t" {
		s.dumpLogs()
		t.Fatalf("no session of obsops_replay at the main primary (%q): the secondary's ingest must replay as that role", got)
	}

	s.make("wan-down")
	var proxy struct {
		Enabled bool `json:"enabled"`
		Toxics  []struct {
			Name string `json:"name"`
		} `json:"toxics"`
	}
	call(t, http.MethodGet, v["OPS_WAN_API_URL"]+"/proxies/wan", "", nil, &proxy)
	if proxy.Enabled {
		t.Fatal("make wan-down left the WAN enabled")
	}
	if c, err := net.DialTimeout("tcp", v["OPS_WAN_LISTEN_ADDR"], time.Second); err == nil {
		c.Close()
		t.Fatal("the cut WAN still accepts connections")
	}
	observatory(false)
	cutAt := time.Now()
	var cut []string
	for i := 1; i <= 20; i++ {
		cut = append(cut, file(i))
	}
	t.Logf("20 files acknowledged at the secondary with the WAN cut in %s", time.Since(cutAt).Round(time.Millisecond))
	for _, id := range cut {
		var f struct {
			ID           string `json:"id"`
			BufferStatus string `json:"buffer_status"`
		}
		if code := call(t, http.MethodGet, secGW+"/raw_data_files/"+id, token, nil, &f); code != http.StatusOK || f.ID != id {
			t.Fatalf("reading %s back at the secondary: %d", id, code)
		}
		if f.BufferStatus != "buffered" {
			t.Errorf("%s at the secondary with the WAN cut: buffer_status %q, want buffered", id, f.BufferStatus)
		}
	}
	time.Sleep(time.Second)
	if code := call(t, http.MethodGet, mainGW+"/raw_data_files/"+cut[0], token, nil, nil); code != http.StatusNotFound {
		t.Fatalf("a file registered with the WAN cut is at the main site: %d", code)
	}

	s.make("wan-up")
	upAt := time.Now()
	atMain(cut, 60*time.Second)
	t.Logf("all 20 at the main site %s after make wan-up", time.Since(upAt).Round(time.Millisecond))
	observatory(true)

	s.make("wan-slow")
	call(t, http.MethodGet, v["OPS_WAN_API_URL"]+"/proxies/wan", "", nil, &proxy)
	names := map[string]bool{}
	for _, x := range proxy.Toxics {
		names[x.Name] = true
	}
	if !proxy.Enabled || !names["latency"] || !names["loss"] {
		t.Fatalf("after make wan-slow: enabled %v, toxics %v", proxy.Enabled, names)
	}
	s.make("wan-up")
	call(t, http.MethodGet, v["OPS_WAN_API_URL"]+"/proxies/wan", "", nil, &proxy)
	if len(proxy.Toxics) != 0 {
		t.Fatalf("make wan-up left toxics %v", proxy.Toxics)
	}

	// Rerun: everything runs, so nothing is started again.
	if out := s.make("up-sites"); strings.Contains(out, "starting") {
		t.Errorf("make up-sites on a running stack started something:\n%s", out)
	}

	// make down: no process of either site is left, no port is open.
	pgDirCmd := exec.Command(filepath.Join(repoRoot, "deploy", "local", "stack.sh"), "pg-dir")
	pgDirCmd.Env = s.env
	pgDir, err := pgDirCmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	before := s.stackPids(strings.TrimSpace(string(pgDir)))
	if len(before) < 15 { // 7 + 5 services, wan, 2 Redis, 2 postmasters (and their children)
		t.Fatalf("only %d processes of the stack found before make down: %v", len(before), before)
	}
	s.make("down")
	var left []string
	for pid, what := range before {
		if alive(pid) {
			left = append(left, fmt.Sprintf("%d (%s)", pid, what))
		}
	}
	for pid, what := range s.stackPids(strings.TrimSpace(string(pgDir))) {
		left = append(left, fmt.Sprintf("%d (%s)", pid, what))
	}
	if len(left) > 0 {
		t.Errorf("make down left %d processes: %v", len(left), left)
	}
	for _, p := range s.ports {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), 200*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("port %d still open after make down", p)
		}
	}
	t.Logf("whole run %s (%d processes stopped)", time.Since(begin).Round(time.Millisecond), len(before))
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
