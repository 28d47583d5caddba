package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/cli/internal/cmd"

	"github.com/obsops/obsops/pkg/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// obsopsBinary builds cmd/obsops once per test binary.
func obsopsBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "obsops-cli-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "obsops")
		out, err := exec.Command("go", "build", "-o", binPath, "./cmd/obsops").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// cliEnv runs the obsops command against one stack, with a configuration directory of its own.
type cliEnv struct {
	st     *stack
	bin    string
	config string // XDG_CONFIG_HOME
	state  string // XDG_STATE_HOME
	db     *sql.DB
	jwt    string // alice's session JWT, from the loopback login

	obsUnit  int64  // a planned obs unit (ensureInstrument)
	svcToken string // the instrument's service token
}

func newCLIEnv(t *testing.T, st *stack) *cliEnv {
	db, err := sql.Open("postgres", st.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &cliEnv{st: st, bin: obsopsBinary(t), config: t.TempDir(), state: t.TempDir(), db: db}
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func (e *cliEnv) cmd(env map[string]string, args ...string) *exec.Cmd {
	return e.cmdContext(context.Background(), env, args...)
}

// cmdContext is cmd ended by ctx: SIGQUIT when ctx is done (a Go program then prints every
// goroutine's stack to stderr and exits 2), SIGKILL 10 s later if it is still there.
func (e *cliEnv) cmdContext(ctx context.Context, env map[string]string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, e.bin, args...)
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGQUIT) }
	c.WaitDelay = 10 * time.Second
	c.Env = append(os.Environ(), "XDG_CONFIG_HOME="+e.config, "XDG_STATE_HOME="+e.state, "OBSOPS_URL=", "OBSOPS_TOKEN=")
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	return c
}

// cliRunLimit bounds one run of obsops in these tests. The longest, the resumed registration of
// 5,000 files, takes about 2 s on a developer's machine; past the limit the test fails with the
// command's goroutines (cmdContext) instead of hanging the package until go test's timeout.
const cliRunLimit = 4 * time.Minute

// run runs obsops with args (env added to the environment) and returns what it did.
func (e *cliEnv) run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliRunLimit)
	defer cancel()
	c := e.cmdContext(ctx, env, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	c.Stdin = strings.NewReader("")
	err := c.Run()
	if ctx.Err() != nil {
		t.Fatalf("obsops %s did not end within %s; its stderr (with its goroutines):\n%s", strings.Join(args, " "), cliRunLimit, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if os.Getenv("OBSOPS_TEST_SHOW") == "1" { // docs/cli.md's examples are taken from this
		t.Logf("$ obsops %s   # exit %d\n%s%s", strings.Join(args, " "), code, errb.String(), out.String())
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs obsops and requires exit 0.
func (e *cliEnv) ok(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	r := e.run(t, env, args...)
	require.Equal(t, 0, r.code, "obsops %v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	return r.stdout
}

// fails runs obsops and requires exit code with stderr containing each of want.
func (e *cliEnv) fails(t *testing.T, code int, env map[string]string, args []string, want ...string) result {
	t.Helper()
	r := e.run(t, env, args...)
	require.Equal(t, code, r.code, "obsops %v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	for _, w := range want {
		require.Contains(t, r.stderr, w, "obsops %v", args)
	}
	return r
}

// browser is a browser: cookies, redirects followed, except to stopAt (a prefix), if set.
func browser(stopAt string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if stopAt != "" && strings.HasPrefix(req.URL.String(), stopAt) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

var authRequestID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// signIn drives the identity provider's login form from loginURL as user, and returns the last
// answer (the loopback listener's, or — with stopAt — the redirect to it).
func (e *cliEnv) signIn(t *testing.T, b *http.Client, loginURL, user, password string) *http.Response {
	t.Helper()
	resp, err := b.Get(loginURL)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := authRequestID.FindStringSubmatch(string(page))
	require.NotNil(t, m, "the login form, got %d at %s: %s", resp.StatusCode, resp.Request.URL, page)
	resp, err = b.PostForm(e.st.Issuer+"/login/username", url.Values{"id": {m[1]}, "username": {user}, "password": {password}})
	require.NoError(t, err)
	return resp
}

func (e *cliEnv) testLogin(t *testing.T) {
	c := e.cmd(nil, "login", "--no-browser", "--url", e.st.GatewayURL, "--wait", "60s")
	stderr, err := c.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	sc := bufio.NewScanner(stderr)
	var loginURL string
	var lines []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		lines = append(lines, line)
		if strings.HasPrefix(line, e.st.GatewayURL+"/idp/login?") {
			loginURL = line
			break
		}
	}
	require.NotEmpty(t, loginURL, "obsops login printed no URL: %v", lines)
	u, err := url.Parse(loginURL)
	require.NoError(t, err)
	redirect := u.Query().Get("redirect_uri")
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/callback$`, redirect)
	require.Equal(t, "S256", u.Query().Get("code_challenge_method"))

	// The browser: provider login, back to the gateway's callback, then to the CLI's listener,
	// which answers the page. The URLs it passes carry a code, never the JWT.
	var seen []string
	b := browser("")
	b.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		seen = append(seen, req.URL.String())
		return nil
	}
	resp := e.signIn(t, b, loginURL, "alice", "wonderland")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", page)
	require.Contains(t, string(page), "Logged in to obsops")
	require.True(t, strings.HasPrefix(resp.Request.URL.String(), redirect+"?"), resp.Request.URL.String())
	for _, s := range seen {
		if strings.HasPrefix(s, redirect) {
			require.NotContains(t, s, "eyJ", "a JWT in the loopback URL: %s", s)
		}
	}
	rest, _ := io.ReadAll(stderr)
	require.NoError(t, c.Wait(), "obsops login: %s", rest)
	require.Contains(t, string(rest), "as alice")

	cfgPath := filepath.Join(e.config, "obsops", "config.yaml")
	st, err := os.Stat(cfgPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the configuration holds a credential")
	cfg, _ := os.ReadFile(cfgPath)
	m := regexp.MustCompile(`token: (eyJ\S+)`).FindStringSubmatch(string(cfg))
	require.NotNil(t, m, "%s", cfg)
	e.jwt = m[1]
	for _, s := range seen {
		require.NotContains(t, s, e.jwt, "the session JWT in a URL: %s", s)
	}

	out := e.ok(t, nil, "whoami", "-o", "json")
	var me struct {
		User struct {
			Username string   `json:"username"`
			Roles    []string `json:"roles"`
		} `json:"user"`
		AuthenticatedBy string `json:"authenticated_by"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &me))
	require.Equal(t, "alice", me.User.Username)
	require.Contains(t, me.User.Roles, "admin")
	require.Equal(t, "jwt", me.AuthenticatedBy)
	require.Contains(t, e.ok(t, nil, "whoami"), "alice")

	// Refusals of the command itself: a bad credential (1), the gateway unreachable (3), usage (2).
	e.fails(t, 1, map[string]string{"OBSOPS_TOKEN": "ops_api_token_nope"}, []string{"whoami"}, "401")
	e.fails(t, 3, map[string]string{"OBSOPS_URL": "http://127.0.0.1:1"}, []string{"whoami", "--timeout", "2s"}, "unreachable")
	e.fails(t, 2, nil, []string{"whoami", "extra"})
	e.fails(t, 2, nil, []string{"nosuchcommand"})
	e.fails(t, 2, nil, []string{"whoami", "--output", "xml"}, "--output")
	e.fails(t, 1, map[string]string{"OBSOPS_URL": e.st.GatewayURL}, []string{"login", "--token", "ops_api_token_wrong"}, "not accepted")
}

// loopbackCode runs a login by hand up to the redirect to a loopback address that nothing
// listens on, and returns the one-time code it carries.
func (e *cliEnv) loopbackCode(t *testing.T, redirect, verifier string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"redirect_uri": {redirect}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}, "state": {"st-1"}}
	resp := e.signIn(t, browser(redirect), e.st.GatewayURL+"/idp/login?"+q.Encode(), "bob", "builder")
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, redirect, loc.Scheme+"://"+loc.Host+loc.Path)
	require.Equal(t, "st-1", loc.Query().Get("state"))
	require.NotContains(t, loc.String(), "eyJ")
	return loc.Query().Get("code")
}

type problemBody struct {
	Status int `json:"status"`
	Errors []struct {
		Location string `json:"location"`
	} `json:"errors"`
}

func postToken(t *testing.T, gw string, body map[string]string) (int, problemBody, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(gw+"/idp/token", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p problemBody
	var m map[string]any
	_ = json.Unmarshal(raw, &p)
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, p, m
}

func (e *cliEnv) testLoginRefusals(t *testing.T) {
	// redirect_uri only on a loopback IP literal with a port.
	for _, bad := range []string{"http://evil.example:8000/cb", "https://127.0.0.1:8000/cb", "http://localhost:8000/cb", "http://127.0.0.1/cb", "http://10.0.0.1:80/cb"} {
		q := url.Values{"redirect_uri": {bad}, "code_challenge": {strings.Repeat("a", 43)}}
		resp, err := http.Get(e.st.GatewayURL + "/idp/login?" + q.Encode())
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s: %s", bad, raw)
		require.Contains(t, string(raw), "query.redirect_uri", bad)
	}
	q := url.Values{"redirect_uri": {"http://127.0.0.1:9/cb"}, "code_challenge": {"short"}}
	resp, err := http.Get(e.st.GatewayURL + "/idp/login?" + q.Encode())
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Contains(t, string(raw), "query.code_challenge")

	// The code: bound to the verifier and the redirect URI, single use even when refused.
	redirect := "http://127.0.0.1:9/callback"
	verifier := strings.Repeat("v", 50)
	code := e.loopbackCode(t, redirect, verifier)
	status, p, _ := postToken(t, e.st.GatewayURL, map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": strings.Repeat("w", 50), "redirect_uri": redirect})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "body.code_verifier", p.Errors[0].Location)
	status, p, _ = postToken(t, e.st.GatewayURL, map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": verifier, "redirect_uri": redirect})
	require.Equal(t, http.StatusBadRequest, status, "a code is spent by its first exchange")
	require.Equal(t, "body.code", p.Errors[0].Location)

	code = e.loopbackCode(t, redirect, verifier)
	status, p, _ = postToken(t, e.st.GatewayURL, map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": verifier, "redirect_uri": "http://127.0.0.1:10/callback"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "body.redirect_uri", p.Errors[0].Location)

	code = e.loopbackCode(t, redirect, verifier)
	status, _, m := postToken(t, e.st.GatewayURL, map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": verifier, "redirect_uri": redirect})
	require.Equal(t, http.StatusOK, status, "%v", m)
	require.Equal(t, "bob", m["user"].(map[string]any)["username"])
	require.NotEmpty(t, m["access_token"])
}

func (e *cliEnv) testTokens(t *testing.T) {
	out := e.ok(t, nil, "token", "create", "--name", "cli-test", "--scope", "read:data", "--expires-in-days", "7", "-o", "json")
	var created struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	require.True(t, strings.HasPrefix(created.Token, "ops_api_token_"), out)
	id := fmt.Sprint(created.ID)

	require.Contains(t, e.ok(t, nil, "token", "list"), "cli-test")
	csvOut := e.ok(t, nil, "token", "list", "-o", "csv")
	require.True(t, strings.HasPrefix(csvOut, "id,name,scopes,"), csvOut)
	require.Contains(t, e.ok(t, nil, "token", "show", id), "cli-test")
	e.ok(t, nil, "token", "usage", id)
	require.Contains(t, e.ok(t, nil, "token", "export"), "cli-test")
	out = e.ok(t, nil, "token", "regenerate", id, "-o", "json")
	require.Contains(t, out, "ops_api_token_")
	require.NotContains(t, out, created.Token)

	// An API token is refused on routes that take only session JWTs, with a message saying so.
	e.fails(t, 1, map[string]string{"OBSOPS_TOKEN": created.Token}, []string{"token", "list"}, "session JWT")
	e.fails(t, 1, nil, []string{"token", "show", "999999"}, "404")
	e.fails(t, 2, nil, []string{"token", "show", "abc"})
	e.fails(t, 2, nil, []string{"token", "create"}, "name")
	e.ok(t, nil, "token", "revoke", id)
}

func (e *cliEnv) testPrograms(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "program.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("short_name: CLI-1\ntitle: CLI test program\npi: alice\n"), 0o644))
	out := e.ok(t, nil, "program", "create", "-f", spec, "-o", "json")
	var p struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	id := fmt.Sprint(p.ID)
	require.Contains(t, e.ok(t, nil, "program", "list"), "CLI-1")
	require.Contains(t, e.ok(t, nil, "program", "show", id), "CLI test program")

	require.NoError(t, os.WriteFile(spec, []byte("short_name: CLI-1\ntitle: renamed\npi: alice\nstatus: draft\n"), 0o644))
	require.Contains(t, e.ok(t, nil, "program", "edit", id, "-f", spec), "renamed")

	// Refusals: the API's 409 and 422 (naming the field), a bad file, usage.
	e.fails(t, 1, nil, []string{"program", "create", "-f", spec}, "409")
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("short_name: CLI-2\ntitle: t\npi: alice\nstatus: nonsense\n"), 0o644))
	e.fails(t, 1, nil, []string{"program", "create", "-f", bad}, "body.status")
	require.NoError(t, os.WriteFile(bad, []byte("short_name: CLI-2\ntitel: typo\n"), 0o644))
	e.fails(t, 1, nil, []string{"program", "create", "-f", bad}, "titel")
	e.fails(t, 2, nil, []string{"program", "create"}, "file")
	e.fails(t, 1, map[string]string{"XDG_CONFIG_HOME": t.TempDir(), "OBSOPS_URL": e.st.GatewayURL}, []string{"program", "create", "-f", spec}, "not logged in")

	e.ok(t, nil, "program", "delete", id)
	e.fails(t, 1, nil, []string{"program", "show", id}, "404")
}

func (e *cliEnv) testSources(t *testing.T) {
	r := testenv.Call(t, http.DefaultClient, http.MethodPost, e.st.GatewayURL+"/sources/", e.jwt,
		map[string]any{"name": "CLI Orion", "kind": "fixed", "ra_deg": 83.822, "dec_deg": -5.391})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	out := e.ok(t, nil, "source", "resolve", "M42", "83.8 -5.4")
	require.Contains(t, out, "M42")
	e.fails(t, 1, nil, []string{"source", "resolve", "no-such-object-xyz"}, "not resolved")

	out = e.ok(t, nil, "source", "search", "--near", "M42", "--radius", "0.5")
	require.Contains(t, out, "CLI Orion")
	out = e.ok(t, nil, "source", "search", "--near", "83.8 -5.4", "--radius", "1", "-o", "csv")
	require.True(t, strings.HasPrefix(out, "id,name,ra_deg,dec_deg,kind\n"), out)
	require.Contains(t, out, "CLI Orion")
	e.fails(t, 2, nil, []string{"source", "search", "--near", "M42"}, "--radius")
	e.fails(t, 1, nil, []string{"source", "search", "--near", "no-such-object-xyz", "--radius", "1"}, "not resolved")

	out = e.ok(t, nil, "visibility", "CLI Orion", "--night", "2026-12-01", "--output", "csv")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Greater(t, len(lines), 10, out)
	require.Contains(t, lines[0], "alt")
	require.Contains(t, e.ok(t, nil, "visibility", "CLI Orion", "--night", "2026-12-01"), "MAX_ALT_DEG")
	e.fails(t, 2, nil, []string{"visibility", "CLI Orion", "--night", "1 Dec"}, "--night")
	e.fails(t, 1, nil, []string{"visibility", "No Such Source", "--night", "2026-12-01"}, "no source")
	// an obs unit's constraints: the windows say which one limits
	var found struct {
		Items []struct {
			ID int64 `json:"id"`
		} `json:"items"`
	}
	testenv.Call(t, http.DefaultClient, http.MethodGet, e.st.GatewayURL+"/sources/?q=CLI%20Orion", e.jwt, nil).JSON(t, &found)
	require.Len(t, found.Items, 1)
	r = testenv.Call(t, http.DefaultClient, http.MethodPost, e.st.GatewayURL+"/observing_program/", e.jwt, map[string]any{
		"short_name": "CLI-VIS", "title": "Constraints", "pi": "P. I.", "obs_units": []map[string]any{
			{"name": "orion-am", "source_id": found.Items[0].ID, "instrument_module_id": 31, "duration_s": 600, "max_airmass": 1.5}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var prog struct {
		ObsUnits []struct {
			ID int64 `json:"id"`
		} `json:"obs_units"`
	}
	r.JSON(t, &prog)
	out = e.ok(t, nil, "visibility", "CLI Orion", "--night", "2026-12-01", "--obs-unit", fmt.Sprint(prog.ObsUnits[0].ID))
	require.Contains(t, out, "START_REASON")
	require.Contains(t, out, "airmass_limit")

	// Pictures to files: the night's plot and a heatmap, each what its extension says.
	dir := t.TempDir()
	png := filepath.Join(dir, "orion.png")
	e.ok(t, nil, "visibility", "CLI Orion", "--night", "2026-12-01", "--plot", png)
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG")
	e.fails(t, 2, nil, []string{"visibility", "CLI Orion", "--night", "2026-12-01", "--plot", filepath.Join(dir, "x.gif")}, ".svg")
	var orion int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM sources WHERE name = 'CLI Orion'`).Scan(&orion))
	heat := filepath.Join(dir, "heat.csv")
	e.ok(t, nil, "heatmap", "--sources", fmt.Sprint(orion), "--year", "2027", "--file", heat)
	b, err = os.ReadFile(heat)
	require.NoError(t, err)
	require.Equal(t, 366, strings.Count(string(b), "\n"), "a header and a row per day")
	e.fails(t, 2, nil, []string{"heatmap", "--year", "2027", "--file", heat}, "--program")

	// A target list in: a dry run stores nothing, the import all rows, a second import is refused
	// naming the rows (exit 1) and stores nothing more.
	list := filepath.Join(dir, "targets.csv")
	require.NoError(t, os.WriteFile(list, []byte("name,ra,dec\ncli-imp-1,05:35:14.16,-05:22:21.5\ncli-imp-2,10.5,20\n"), 0o644))
	count := func() (n int) {
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE name LIKE 'cli-imp-%'`).Scan(&n))
		return n
	}
	require.Contains(t, e.ok(t, nil, "source", "import", list, "--dry-run"), "2 sources would be created")
	require.Zero(t, count())
	require.Contains(t, e.ok(t, nil, "source", "import", list), "2 sources created")
	require.Equal(t, 2, count())
	e.fails(t, 1, nil, []string{"source", "import", list}, "body.rows[1].name")
	require.Equal(t, 2, count())
}

// instrument is a planned obs unit and a service token for the instrument's writes.
func (e *cliEnv) instrument(t *testing.T) (obsUnit int64, token string) {
	t.Helper()
	var src, prog int64
	require.NoError(t, e.db.QueryRow(`INSERT INTO sources (name, kind, ra_deg, dec_deg) VALUES ('cli-src', 'fixed', 10, -20) RETURNING id`).Scan(&src))
	require.NoError(t, e.db.QueryRow(`INSERT INTO observing_programs (short_name, title, pi) VALUES ('CLI-INGEST', 't', 'pi') RETURNING id`).Scan(&prog))
	require.NoError(t, e.db.QueryRow(`INSERT INTO obs_units (program_id, name, source_id, instrument_module_id, duration_s) VALUES ($1, 'u1', $2, 11, 600) RETURNING id`, prog, src).Scan(&obsUnit))
	token = e.st.Admin(t, "create-service-token", "--account", "cli-instrument", "--kind", "instrument", "--modules", "11", "--scopes",
		"write:observations,write:data,read:data,read:observations", "--name", "cli", "--days", "30")
	return obsUnit, token
}

func (e *cliEnv) ensureInstrument(t *testing.T) (int64, string) {
	if e.obsUnit == 0 {
		e.obsUnit, e.svcToken = e.instrument(t)
	}
	return e.obsUnit, e.svcToken
}

func (e *cliEnv) testIngest(t *testing.T) {
	ou, tok := e.ensureInstrument(t)
	env := map[string]string{"OBSOPS_URL": e.st.GatewayURL, "OBSOPS_TOKEN": tok}
	out := e.ok(t, env, "ingest", "start", "--obs-unit", fmt.Sprint(ou), "--module", "11", "-o", "json")
	var started struct {
		ID            string `json:"id"`
		TransactionID string `json:"transaction_id"`
		Status        string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &started))
	require.NotEmpty(t, started.ID, out)

	dir := t.TempDir()
	for i := range 3 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.dat", i)), []byte(strings.Repeat("x", i+1)), 0o644))
	}
	r := e.run(t, env, "ingest", "register", dir, "--execution", started.ID, "--module", "11", "--checksum", "sha256")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "3 files registered in 1 batches")
	require.Contains(t, r.stdout, "TRANSACTION_ID")

	pkgOut := e.ok(t, env, "ingest", "package", "create", "--execution", started.ID, "--module", "11", "--name", "scan.tar", "-o", "json")
	var pkg struct {
		ID            string `json:"id"`
		TransactionID string `json:"transaction_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(pkgOut), &pkg))
	require.Contains(t, e.ok(t, env, "ingest", "receipts", started.TransactionID, pkg.TransactionID), started.TransactionID)
	e.ok(t, env, "ingest", "finish", started.ID)

	// Refusals: the API's 422 naming the field, usage errors, the wrong credential.
	e.fails(t, 1, env, []string{"ingest", "start", "--obs-unit", "999999", "--module", "11"}, "obs_unit_id")
	e.fails(t, 1, env, []string{"ingest", "register", dir, "--execution", started.ID, "--module", "999", "--state", filepath.Join(t.TempDir(), "s")}, "instrument_module_id")
	e.fails(t, 2, env, []string{"ingest", "register", dir, "--execution", "not-a-uuid", "--module", "11"}, "--execution")
	e.fails(t, 2, env, []string{"ingest", "register", dir, "--execution", started.ID, "--module", "11", "--batch", "5000"}, "--batch")
	e.fails(t, 2, env, []string{"ingest", "register", dir, "--execution", started.ID, "--module", "11", "--in-flight", "0"}, "--in-flight")
	e.fails(t, 2, env, []string{"ingest", "finish"})
	e.fails(t, 1, map[string]string{"OBSOPS_URL": e.st.GatewayURL, "OBSOPS_TOKEN": e.jwt}, []string{"ingest", "start", "--obs-unit", fmt.Sprint(ou), "--module", "11"}, "403")
}

func (e *cliEnv) testRegisterResume(t *testing.T) {
	ou, tok := e.ensureInstrument(t)
	env := map[string]string{"OBSOPS_URL": e.st.GatewayURL, "OBSOPS_TOKEN": tok}
	out := e.ok(t, env, "ingest", "start", "--obs-unit", fmt.Sprint(ou), "--module", "11", "-o", "json")
	var started struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &started))

	const files = 5000
	dir := t.TempDir()
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%50))
		require.NoError(t, os.MkdirAll(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.dat", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	state := filepath.Join(t.TempDir(), "register.jsonl")
	args := []string{"ingest", "register", dir, "--execution", started.ID, "--module", "11", "--batch", "100", "--state", state, "--no-receipts"}

	// First run: SIGKILLed once about half the batches are acknowledged.
	c := e.cmd(env, args...)
	var errb bytes.Buffer
	c.Stderr = &errb
	require.NoError(t, c.Start())
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(state)
		if strings.Count(string(b), `"done":`) >= 25 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no progress: %s", errb.String())
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, c.Process.Signal(syscall.SIGKILL))
	_ = c.Wait()
	b, _ := os.ReadFile(state)
	doneBefore := strings.Count(string(b), `"done":`)
	require.Less(t, doneBefore, files/100, "killed before the end")
	// Bounded: at most the requests in flight and as many batches planned for the next free
	// slots are unacknowledged in the state file.
	plannedBefore := strings.Count(string(b), `"batch":`)
	require.LessOrEqual(t, plannedBefore-doneBefore, 2*cmd.DefaultRegisterInFlight, "batches planned but unacknowledged")
	// As if the kill had come after the last acknowledged request was sent but before its answer
	// was recorded: that batch is applied at the API, yet the state file says only "planned".
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n")+"\n", "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], `"done":`) {
			lines = append(lines[:i], lines[i+1:]...)
			break
		}
	}
	require.NoError(t, os.WriteFile(state, []byte(strings.Join(lines, "")), 0o600))
	doneBefore--

	// Second run: only what is missing.
	r := e.run(t, env, args...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf("%d files registered in 50 batches", files))
	require.Regexp(t, fmt.Sprintf(`%d registered before, [1-9]\d* batches to resend`, doneBefore*100), r.stderr)

	// A third run registers nothing.
	r = e.run(t, env, args...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "0 batches to resend, 0 files to register")

	// The database: every file once, none twice (after the buffer's worker applied them).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n, distinct int
	for {
		require.NoError(t, e.db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT path) FROM raw_data_files WHERE executed_obs_unit_id = $1`, started.ID).Scan(&n, &distinct))
		if n >= files || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, files, n, "every file registered once")
	require.Equal(t, files, distinct, "no file registered twice")
}

func (e *cliEnv) testTransfer(t *testing.T) {
	out := e.ok(t, nil, "transfer", "overview")
	require.Contains(t, out, "COUNTER")
	require.Contains(t, e.ok(t, nil, "transfer", "overview", "-o", "json"), "funnel")
	out = e.ok(t, nil, "transfer", "failures", "-o", "json")
	require.Contains(t, out, `"items"`)
	out = e.ok(t, nil, "transfer", "reset", "--all-failed", "transfer", "--dry-run", "-o", "json")
	require.Contains(t, out, `"dry_run": true`)
	// Without --yes it asks; no answer means nothing is reset (exit 1).
	e.fails(t, 1, nil, []string{"transfer", "reset", "--all-failed", "transfer"}, "not confirmed")
	e.ok(t, nil, "transfer", "reset", "--all-failed", "transfer", "--yes")
	e.ok(t, nil, "transfer", "reconcile")

	e.fails(t, 1, nil, []string{"transfer", "reset", "--all-failed", "nonsense", "--yes"}, "422")
	e.fails(t, 1, nil, []string{"transfer", "reset", "transfer", "999999", "--yes"}, "404")
	e.fails(t, 2, nil, []string{"transfer", "reset", "transfer"})
	_, tok := e.ensureInstrument(t)
	e.fails(t, 1, map[string]string{"OBSOPS_TOKEN": tok}, []string{"transfer", "failures"}, "session JWT")
}

func (e *cliEnv) testSite(t *testing.T) {
	r := e.run(t, nil, "site", "status")
	require.Contains(t, []int{0, 1}, r.code, r.stderr)
	require.Contains(t, r.stdout, "status")
	require.Contains(t, e.ok(t, nil, "site", "status", "-o", "json", "--url", e.st.GatewayURL), "{")
	e.fails(t, 3, nil, []string{"site", "status", "--url", "http://127.0.0.1:1", "--timeout", "1s"}, "unreachable")
}
