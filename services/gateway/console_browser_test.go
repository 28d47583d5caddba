package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/gateway"
)

// consoleStack is the suite with the development identity provider in front of authtoken, the
// console as the login's destination, and what the console tests drive: an instrument's token,
// a mover's token, Orion KL in the catalog and an execution to register files in; and an
// observatory — a second site service, a secondary named "observatory" — whose /buffer-stats
// the main site polls through a WAN (toxiproxy) the test cuts and restores.
type consoleStack struct {
	*testenv.Suite
	wan        *toxiproxy.Proxy // the main site → the observatory's site service
	idp        string           // devidp's base URL
	admin      string           // JWT of an admin made on the command line (setup only)
	instrument string           // API token of the instrument (write:observations, write:data)
	mover      string           // API token of the mover (write:data)
	orion      int64            // source id of Orion KL
	execution  string           // an executed obs unit of module 31
	files      int
}

// devidpBinary is bin/devidp (OPS_BIN_DIR), else deploy/devidp built into the test's temp dir.
func devidpBinary(t *testing.T) string {
	if dir := os.Getenv("OPS_BIN_DIR"); dir != "" {
		if p := filepath.Join(dir, "devidp"); fileExists(p) {
			return p
		}
	}
	out := filepath.Join(t.TempDir(), "devidp")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(testenv.RepoRoot(t), "deploy", "devidp")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func startConsoleStack(t *testing.T) *consoleStack {
	t.Helper()
	gwAddr, idpAddr, obsAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	wan := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"wan-observatory", "127.0.0.1:0", obsAddr)
	require.NoError(t, wan.Start())
	t.Cleanup(wan.Stop)
	idp := "http://" + idpAddr
	callback := "http://" + gwAddr + "/idp/callback"
	p := testenv.Start(t, "devidp", devidpBinary(t), map[string]string{}, "-addr", idpAddr, "-redirect-uris", callback,
		"-client-id", "obsops-console", "-client-secret", "console-secret")
	testenv.WaitReady(t, p, idp+"/.well-known/openid-configuration", 20*time.Second)
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{
		"OPS_GATEWAY_ADDR": gwAddr, "OPS_RATE_LIMIT_PER_MINUTE": "0",
		"OPS_OIDC_ISSUER": idp, "OPS_OIDC_CLIENT_ID": "obsops-console", "OPS_OIDC_CLIENT_SECRET": "console-secret",
		"OPS_OIDC_REDIRECT_URL": callback, "OPS_UI_REDIRECT_URL": "http://" + gwAddr + "/console/",
		"OPS_BOOTSTRAP_ADMINS": "alice",
		"OPS_PLANNER_INTERVAL": "100ms", "OPS_RETRY_BACKOFF": "100ms", "OPS_WS_HEARTBEAT": "1s",
		"OPS_OVERVIEW_INTERVAL":      "100ms", // 10 updates a second, the rate the console is measured at
		"OPS_OBSERVATORY_STATUS_URL": "http://" + wan.Listen + "/buffer-stats",
	}})
	cs := &consoleStack{Suite: s, idp: idp, wan: wan}
	obsEnv := map[string]string{}
	for k, v := range s.Env {
		obsEnv[k] = v
	}
	delete(obsEnv, "OPS_OBSERVATORY_STATUS_URL")
	obsEnv["OPS_SITE_ADDR"], obsEnv["OPS_SITE_TYPE"], obsEnv["OPS_SITE_NAME"] = obsAddr, "secondary", "observatory"
	obs := testenv.Start(t, "site-observatory", testenv.Binary(t, "site"), obsEnv)
	testenv.WaitReady(t, obs, "http://"+obsAddr+"/readyz", 30*time.Second)
	cs.admin = s.JWT(t, "setup-admin", "admin")
	cs.instrument = s.Admin(t, "create-service-token", "--account", "instrument", "--kind", "instrument", "--modules", "31", "--scopes",
		"write:observations,write:data,read:data,read:observations", "--name", "console", "--days", "1")
	cs.mover = s.Admin(t, "create-service-token", "--account", "mover", "--scopes", "write:data", "--kind", "mover", "--locations", "1,2,3,4,5", "--name", "mover", "--days", "1")

	var src struct{ ID int64 }
	r := cs.api(t, "POST", "/sources/", cs.admin, map[string]any{"name": "Orion KL", "kind": "fixed", "ra_deg": 83.80900, "dec_deg": -5.37264,
		"aliases": []string{"Orion-KL"}, "object_type": "hot core"}, 201)
	r.JSON(t, &src)
	cs.orion = src.ID
	var prog struct {
		ObsUnits []struct{ ID int64 } `json:"obs_units"`
	}
	r = cs.api(t, "POST", "/observing_program/", cs.admin, map[string]any{"short_name": "CONSOLE-1", "title": "Console test", "pi": "A. Observer",
		"status": "active", "obs_units": []map[string]any{{"name": "orion-lfa", "source_id": cs.orion, "instrument_module_id": 31, "duration_s": 3600}}}, 201)
	r.JSON(t, &prog)
	var start struct{ ID string }
	r = cs.api(t, "POST", "/executed_obs_units/start", cs.instrument, map[string]any{"obs_unit_id": prog.ObsUnits[0].ID,
		"instrument_module_id": 31, "start_time": "2026-11-25T01:00:00Z"}, 201)
	r.JSON(t, &start)
	cs.execution = start.ID
	return cs
}

func (cs *consoleStack) api(t *testing.T, method, path, bearer string, body any, want int) testenv.Response {
	t.Helper()
	r := testenv.Call(t, http.DefaultClient, method, cs.GatewayURL+path, bearer, body)
	require.Equal(t, want, r.Status, "%s %s: %s", method, path, r.Body)
	return r
}

// register registers one file of the execution and returns its id.
func (cs *consoleStack) register(t *testing.T) string {
	t.Helper()
	cs.files++
	var a struct{ ID string }
	cs.api(t, "POST", "/raw_data_files/", cs.instrument, map[string]any{"executed_obs_unit_id": cs.execution, "instrument_module_id": 31,
		"path": fmt.Sprintf("2026-11-25/scan0001/f%04d.fits", cs.files), "size_bytes": 1000, "checksum": "sha256:" + strings.Repeat("ab", 32)}, 201).JSON(t, &a)
	return a.ID
}

// failedPackageOperation finalizes a package of a new file and fails its raw_data_package
// operation for good through the agent API, as a mover would; it answers the operation id.
func (cs *consoleStack) failedPackageOperation(t *testing.T, name string) (op int64, pkgID string) {
	t.Helper()
	file := cs.register(t)
	var pkg struct{ ID string }
	cs.api(t, "POST", "/raw_data_package/", cs.instrument, map[string]any{"executed_obs_unit_id": cs.execution, "instrument_module_id": 31,
		"name": name, "file_ids": []string{file}}, 201).JSON(t, &pkg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := testenv.Call(t, http.DefaultClient, "PUT", cs.GatewayURL+"/raw_data_package/"+pkg.ID+"/finalize", cs.instrument,
			map[string]any{"size_bytes": 1000, "checksum": "sha256:" + strings.Repeat("cd", 32)})
		if r.Status == 200 {
			break
		}
		require.True(t, time.Now().Before(deadline), "finalize: %d %s", r.Status, r.Body)
		time.Sleep(100 * time.Millisecond)
	}
	return cs.failNext(t, pkg.ID), pkg.ID
}

// failNext claims raw_data_package operations until it gets the package's, and fails it.
func (cs *consoleStack) failNext(t *testing.T, pkgID string) int64 {
	return cs.claimAnd(t, pkgID, func(id int64) {
		cs.api(t, "POST", fmt.Sprintf("/api/transfer/agent/operations/%d/fail", id), cs.mover,
			map[string]any{"agent": "m1", "error_type": "tar_failed", "message": "disk full", "retryable": false}, 200)
	})
}

// completeNext claims raw_data_package operations until it gets the package's, and completes
// it; it answers when the complete was answered.
func (cs *consoleStack) completeNext(t *testing.T, pkgID string) time.Time {
	var at time.Time
	cs.claimAnd(t, pkgID, func(id int64) {
		cs.api(t, "POST", fmt.Sprintf("/api/transfer/agent/operations/%d/complete", id), cs.mover,
			map[string]any{"agent": "m1", "bytes": 1000, "checksum": "sha256:" + strings.Repeat("cd", 32)}, 200)
		at = time.Now()
	})
	return at
}

// claimAnd claims raw_data_package operations until it gets the package's, and does report
// with it.
func (cs *consoleStack) claimAnd(t *testing.T, pkgID string, report func(id int64)) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var claimed struct {
			Items []struct {
				ID               int64   `json:"id"`
				RawDataPackageID *string `json:"raw_data_package_id"`
			} `json:"items"`
		}
		cs.api(t, "POST", "/api/transfer/agent/claim", cs.mover, map[string]any{"kinds": []string{"raw_data_package"}, "max": 10, "agent": "m1"}, 200).JSON(t, &claimed)
		for _, o := range claimed.Items {
			if o.RawDataPackageID != nil && *o.RawDataPackageID == pkgID {
				report(o.ID)
				return o.ID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no raw_data_package operation of package %s to claim", pkgID)
	return 0
}

// browser is one headless Chromium (its own profile) with every request it makes recorded: a
// request to anything but the gateway (or, for the login form only, devidp) fails the test.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	foreign []string
}

func newBrowser(t *testing.T, exe string, allowed ...string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		// every host but loopback fails to resolve: a CDN reference could not load anyway
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Do(ctx)) // start the browser (without a timeout: it would stop it)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			u, err := url.Parse(e.Request.URL)
			if err != nil || u.Scheme == "data" || u.Scheme == "blob" {
				return
			}
			ok := false
			for _, a := range allowed {
				ok = ok || u.Host == a
			}
			if !ok {
				b.mu.Lock()
				b.foreign = append(b.foreign, e.Request.URL)
				b.mu.Unlock()
			}
		}
	}))
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.foreign) > 0 {
			t.Errorf("requests left the suite's origin: %v", b.foreign)
		}
	})
	return b
}

// run runs steps in order within timeout.
func (b *browser) run(t *testing.T, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%v; %s", err, b.state())
	}
}

// get runs one action that answers a value, within timeout.
func get[T any](t *testing.T, b *browser, timeout time.Duration, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%v; %s", err, b.state())
	}
	return v
}

// poll waits until the page's expression js is truthy and answers its value, evaluated every
// 50 ms: on a timer, not on animation frames (chromedp's default), which a busy or unpainted page
// may not produce.
func poll[T any](js string) chromedp.Action[T] {
	return chromedp.Poll[T](js, chromedp.WithPollingInterval(50*time.Millisecond))
}

// state describes what the page shows, for a failure's message: the hash, the fields the
// browser's own validation holds invalid (a submit they block sends nothing) and main's text.
func (b *browser) state() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`"the page at " + location.hash + ", invalid fields [" +
		[...document.querySelectorAll("main :invalid")].map((e) => e.name || e.id || e.tagName).join(", ") +
		"], shows:\n" + document.getElementById("main").innerText`))
	if err != nil {
		return fmt.Sprintf("the page could not be read: %v", err)
	}
	return s
}

// signIn goes through the console's Sign in, devidp's form, and back to the console.
func (b *browser) signIn(t *testing.T, gw, user, password string) {
	t.Helper()
	b.run(t, 30*time.Second,
		chromedp.Navigate(gw+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#signin")),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), user),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Submit(chromedp.CSS("#password")),
		chromedp.WaitVisible(chromedp.CSS("#nav")),
		chromedp.WaitVisible(chromedp.CSS("#funnel[data-seq]")))
	loc := get(t, b, 5*time.Second, chromedp.Location())
	require.NotContains(t, loc, "access_token", "the JWT leaves the address bar at once")
	stored := get(t, b, 5*time.Second, chromedp.Evaluate[int](`localStorage.length + sessionStorage.length`))
	require.Zero(t, stored, "the session is kept in memory only")
}

// go navigates inside the console (the session stays in the page's memory).
func (b *browser) goTo(t *testing.T, hash, waitFor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`void (location.hash = `+jsString(hash)+`)`), chromedp.WaitVisible(chromedp.CSS(waitFor)))
	if err != nil {
		t.Fatalf("%s: %s not shown (%v); %s", hash, waitFor, err, b.state())
	}
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

// shot saves a screenshot of the page into dir.
func (b *browser) shot(t *testing.T, dir, name string) {
	t.Helper()
	b.run(t, 5*time.Second, chromedp.Sleep(150*time.Millisecond))
	png := get(t, b, 20*time.Second, chromedp.FullScreenshot(100))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// screenshotDir is OPS_CONSOLE_SCREENSHOTS (make screenshots), else a new temporary directory
// kept after the test as its artifact; tests never write into the repository.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("OPS_CONSOLE_SCREENSHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	d, err := os.MkdirTemp("", "obsops-console-screenshots-")
	require.NoError(t, err)
	return d
}

// TestConsoleInBrowser drives the console in headless Chromium against the real suite: sign-in
// through the development identity provider, an API token shown once and revoked, the live
// funnel (and its updates' age on screen at 10 a second), an admin's reset through dry run and
// confirmation (a viewer gets no button, and the API refuses the request), the observatory on the
// site page while the WAN is cut, Orion KL's visibility plot, and the WebSocket indicator while
// the transfer service is down. No request may leave the suite.
func TestConsoleInBrowser(t *testing.T) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed: make test installs it (deploy/local/stack.sh test-deps)")
	}
	c, err := gateway.NewConsole()
	require.NoError(t, err)
	t.Logf("console assets: %d bytes gzip, %d bytes brotli, limit 300 KB", c.CompressedSize(), c.BrotliSize())
	require.LessOrEqual(t, c.CompressedSize(), 300_000)
	require.LessOrEqual(t, c.BrotliSize(), 300_000)

	cs := startConsoleStack(t)
	gw := cs.GatewayURL
	gwHost := strings.TrimPrefix(gw, "http://")
	idpHost := strings.TrimPrefix(cs.idp, "http://")
	shots := screenshotDir(t)
	t.Logf("screenshots in %s", shots)
	failedOp, failedPkg := cs.failedPackageOperation(t, "pkg-failed-1")

	alice := newBrowser(t, exe, gwHost, idpHost)
	alice.signIn(t, gw, "alice", "wonderland")

	t.Run("the funnel renders within a second of navigation", func(t *testing.T) {
		mark := get(t, alice, 5*time.Second, chromedp.Evaluate[float64](`performance.getEntriesByName("obsops:funnel-rendered")[0].startTime`))
		t.Logf("funnel first rendered %.0f ms after navigation (performance.mark obsops:funnel-rendered)", mark)
		require.Less(t, mark, 1000.0)
		alice.shot(t, shots, "overview")
	})

	t.Run("an API token is shown once, works, and is revoked", func(t *testing.T) {
		alice.goTo(t, "#/account", "#new-token")
		alice.run(t, 20*time.Second,
			chromedp.SendKeys(chromedp.CSS(`#new-token input[name="name"]`), "laptop script"),
			chromedp.Click(chromedp.CSS(`#new-token input[value="read:data"]`)),
			chromedp.Click(chromedp.CSS(`#new-token button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#raw-token")),
			chromedp.WaitVisible(chromedp.CSS("#copy-token")))
		raw := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#raw-token")))
		require.True(t, strings.HasPrefix(raw, "ops_api_token_"), raw)
		alice.shot(t, shots, "account")
		var me struct {
			User struct{ Username string } `json:"user"`
		}
		cs.api(t, "GET", "/auth/me", raw, nil, 200).JSON(t, &me)
		require.Equal(t, "alice", me.User.Username)

		// shown once: after leaving the page the raw value is nowhere on it
		alice.goTo(t, "#/overview", "#funnel")
		alice.goTo(t, "#/account", "#token-table")
		alice.run(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#token-table tbody tr`)))
		html := get(t, alice, 10*time.Second, chromedp.OuterHTML(chromedp.CSS("html")))
		require.NotContains(t, html, raw)
		require.Contains(t, html, "laptop script")

		alice.run(t, 20*time.Second,
			chromedp.Click(chromedp.CSS(`#token-table tbody tr:first-child button.danger`)),
			chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.Click(chromedp.CSS("#confirm")),
			chromedp.WaitVisible(chromedp.CSS("#revoked")))
		deadline := time.Now().Add(3 * time.Second)
		for testenv.Call(t, http.DefaultClient, "GET", gw+"/auth/me", raw, nil).Status != 401 {
			require.True(t, time.Now().Before(deadline), "the revoked token still verifies")
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("the funnel changes on screen within a second of a registration", func(t *testing.T) {
		alice.goTo(t, "#/overview", `#funnel[data-seq]`)
		shown := func(want int64) string {
			return `(() => document.querySelector('#funnel [data-key="files_registered"]').textContent === "` + strconv.FormatInt(want, 10) + `")()`
		}
		var ov struct {
			Funnel struct {
				FilesRegistered int64 `json:"files_registered"`
			} `json:"funnel"`
		}
		cs.api(t, "GET", "/api/transfer/overview", "", nil, 200).JSON(t, &ov)
		n := ov.Funnel.FilesRegistered
		get(t, alice, 5*time.Second, chromedp.Poll[bool](shown(n), chromedp.WithPollingInterval(10*time.Millisecond)))
		for range 3 {
			t0 := time.Now()
			cs.register(t)
			n++
			get(t, alice, 5*time.Second, chromedp.Poll[bool](shown(n), chromedp.WithPollingInterval(10*time.Millisecond)))
			took := time.Since(t0)
			t.Logf("files registered: %d on screen %d ms after the registration's 201", n, took.Milliseconds())
			require.Less(t, took, time.Second)
		}
	})

	t.Run("an admin resets a failed operation through dry run and confirmation", func(t *testing.T) {
		alice.goTo(t, "#/failures", "#failed-table")
		row := fmt.Sprintf(`//table[@id="failed-table"]//tr[td[1][contains(., "raw_data_package %d")]]`, failedOp)
		alice.run(t, 20*time.Second,
			chromedp.WaitVisible(row),
			chromedp.Click(row+`//button[contains(@class,"reset")]`),
			chromedp.WaitVisible(chromedp.CSS("#dry-run")))
		dry := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#dry-run")))
		require.Contains(t, dry, "would become PENDING")
		alice.shot(t, shots, "failures")
		alice.run(t, 20*time.Second,
			chromedp.SendKeys(chromedp.CSS("#reset-reason"), "disk replaced"),
			chromedp.Click(chromedp.CSS("#confirm-reset")),
			chromedp.WaitVisible(chromedp.CSS("#reset-done")),
			chromedp.WaitVisible(chromedp.CSS(`#failed-table td.empty`)))
		var hist struct {
			Events []struct{ Event, Actor string } `json:"events"`
		}
		cs.api(t, "GET", fmt.Sprintf("/api/transfer/failure-history/raw_data_package/%d", failedOp), cs.admin, nil, 200).JSON(t, &hist)
		last := hist.Events[len(hist.Events)-1]
		require.Equal(t, "reset", last.Event)
		require.Equal(t, "alice", last.Actor)
	})

	t.Run("a viewer sees no reset button and the API refuses a forced reset", func(t *testing.T) {
		require.Equal(t, failedOp, cs.failNext(t, failedPkg), "the reset operation is claimed again, and fails again")
		bob := newBrowser(t, exe, gwHost, idpHost)
		bob.signIn(t, gw, "bob", "builder")
		row := fmt.Sprintf(`//table[@id="failed-table"]//tr[td[1][contains(., "raw_data_package %d")]]`, failedOp)
		bob.goTo(t, "#/failures", "#failed-table")
		bob.run(t, 20*time.Second, chromedp.WaitVisible(row))
		buttons := get(t, bob, 5*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("button.reset").length`))
		resetAll := get(t, bob, 5*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#reset-all, #reconcile-all").length`))
		require.Zero(t, buttons, "a viewer gets no reset button")
		require.Zero(t, resetAll)
		bob.shot(t, shots, "failures-viewer")
		viewer := cs.JWT(t, "bob")
		for _, path := range []string{fmt.Sprintf("/api/transfer/operation/raw_data_package/%d/reset?reason=forced", failedOp),
			"/api/transfer/operation/raw_data_package/reset-all-failed?reason=forced"} {
			r := cs.api(t, "POST", path, viewer, nil, 403)
			require.Contains(t, r.Header.Get("Content-Type"), "problem+json")
		}
		var o struct{ Status string }
		cs.api(t, "GET", fmt.Sprintf("/api/transfer/operation/raw_data_package/%d", failedOp), viewer, nil, 200).JSON(t, &o)
		require.Equal(t, "FAILED", o.Status, "the refused reset changed nothing")
	})

	t.Run("the funnel changes on screen within a second of a mover's complete", func(t *testing.T) {
		alice.goTo(t, "#/overview", `#funnel[data-seq]`)
		completed := `document.querySelector("#operations tbody tr:first-child td:nth-of-type(3)").textContent`
		get(t, alice, 5*time.Second, poll[bool](completed+` === "0"`))
		cs.api(t, "POST", fmt.Sprintf("/api/transfer/operation/raw_data_package/%d/reset?reason=retry", failedOp), cs.admin, nil, 200)
		t0 := cs.completeNext(t, failedPkg)
		get(t, alice, 5*time.Second, chromedp.Poll[bool](completed+` === "1"`, chromedp.WithPollingInterval(10*time.Millisecond)))
		took := time.Since(t0)
		t.Logf("raw_data_package COMPLETED 0 → 1 on screen %d ms after the mover's complete was answered", took.Milliseconds())
		require.Less(t, took, time.Second)
	})

	t.Run("the live funnel keeps up with 10 updates a second, nothing older than 500 ms on screen", func(t *testing.T) {
		u := measureUpdates(t, cs, alice, 10*time.Second, 20)
		t.Logf("live funnel: %s", u)
		require.GreaterOrEqual(t, u.Rate, 8.0, "the planner publishes about 10 updates a second (OPS_OVERVIEW_INTERVAL 100ms)")
		require.LessOrEqual(t, u.maxAge(), 500.0, "no update older than 500 ms on screen")
	})

	t.Run("the site page shows the observatory, unreachable since the WAN was cut", func(t *testing.T) {
		alice.goTo(t, "#/site", "#site-facts")
		alice.run(t, 15*time.Second, chromedp.WaitVisible(chromedp.CSS(`#observatory-reachable[data-reachable="true"]`)))
		title := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#observatory h2")))
		require.Equal(t, "Observatory observatory", title)
		cs.wan.Stop()
		cut := time.Now()
		alice.run(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#observatory-reachable[data-reachable="false"]`)))
		text := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#observatory-reachable")))
		require.True(t, strings.HasPrefix(text, "unreachable since "+cut.UTC().Format("2006-01-02")), text)
		since, err := time.Parse("2006-01-02 15:04:05Z", strings.TrimPrefix(text, "unreachable since "))
		require.NoError(t, err, text)
		require.WithinDuration(t, cut, since, 4*time.Second)
		t.Logf("observatory shown %q %d ms after the cut", text, time.Since(cut).Milliseconds())
		alice.shot(t, shots, "site-observatory-cut")
		require.NoError(t, cs.wan.Start())
		alice.run(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#observatory-reachable[data-reachable="true"]`)))
	})

	t.Run("the source page shows Orion KL's plot and windows for a fixed night", func(t *testing.T) {
		alice.goTo(t, fmt.Sprintf("#/sources/%d/2026-12-01", cs.orion), "#visibility-plot")
		width := get(t, alice, 20*time.Second,
			poll[int](`(() => { const i = document.getElementById("visibility-plot"); return i && i.complete && i.naturalWidth > 0 ? i.naturalWidth : null })()`))
		rows := get(t, alice, 5*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#windows tbody tr").length`))
		require.Positive(t, width)
		require.Positive(t, rows)
		text := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#windows")))
		require.Contains(t, text, "rises above the elevation limit")
		alice.shot(t, shots, "source")
	})

	t.Run("the other pages render", func(t *testing.T) {
		alice.goTo(t, "#/packages", "#package-table")
		alice.shot(t, shots, "packages")
		// a problem is shown as its title and detail, the field it names marked invalid
		alice.run(t, 20*time.Second,
			chromedp.SendKeys(chromedp.CSS(`#package-search input[name="executed_obs_unit_id"]`), "not-a-uuid"),
			chromedp.Click(chromedp.CSS(`#package-search button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#package-search input[name="executed_obs_unit_id"][aria-invalid="true"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#package-results .problem`)))
		problemText := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS(`#package-results .problem`)))
		require.Contains(t, problemText, "query.executed_obs_unit_id")
		alice.goTo(t, "#/site", "#site-facts")
		alice.shot(t, shots, "site")
		alice.goTo(t, "#/programs", "#program-table")
		alice.shot(t, shots, "programs")
		// an admin creates a program; a taken short name is a problem naming the field
		alice.run(t, 20*time.Second,
			chromedp.SendKeys(chromedp.CSS(`#new-program input[name="short_name"]`), "CONSOLE-1"),
			chromedp.SendKeys(chromedp.CSS(`#new-program input[name="title"]`), "Second look"),
			chromedp.SendKeys(chromedp.CSS(`#new-program input[name="pi"]`), "B. Builder"),
			chromedp.Click(chromedp.CSS(`#new-program button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#new-program input[name="short_name"][aria-invalid="true"]`)),
			chromedp.Evaluate[chromedp.Void](`void (document.querySelector('#new-program input[name="short_name"]').value = "")`),
			chromedp.SendKeys(chromedp.CSS(`#new-program input[name="short_name"]`), "CONSOLE-2"),
			chromedp.Click(chromedp.CSS(`#new-program button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#obs-units`)))
		title := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("h1")))
		require.Equal(t, "CONSOLE-2: Second look", title)
	})

	t.Run("the program's creator edits its title and an obs unit's duration; a viewer sees no Edit", func(t *testing.T) {
		var created struct {
			ID int64 `json:"id"`
		}
		cs.api(t, "POST", "/observing_program/", cs.JWT(t, "alice"), map[string]any{"short_name": "CONSOLE-EDIT", "title": "Before", "pi": "A. Alice",
			"status": "active", "obs_units": []map[string]any{{"name": "edit-u1", "source_id": cs.orion, "instrument_module_id": 31, "duration_s": 3600,
				"max_airmass": 2, "lst_range": map[string]any{"start_hours": 22, "end_hours": 2}}}}, 201).JSON(t, &created)
		alice.goTo(t, fmt.Sprintf("#/programs/%d", created.ID), "#obs-units")
		get(t, alice, 10*time.Second, poll[bool](`(document.querySelector("h1").textContent === "CONSOLE-EDIT: Before" && !!document.getElementById("edit-program-button")) || null`))
		alice.run(t, 20*time.Second,
			chromedp.Click(chromedp.CSS(`#edit-program-button`)),
			chromedp.WaitVisible(chromedp.CSS(`#edit-program input[name="title"]`)),
			chromedp.Evaluate[chromedp.Void](`void (document.querySelector('#edit-program input[name="title"]').value = "")`),
			chromedp.SendKeys(chromedp.CSS(`#edit-program input[name="title"]`), "After"),
			chromedp.Evaluate[chromedp.Void](`void (document.querySelector('#edit-program input[name="unit_duration_s"]').value = "7200")`),
			chromedp.Click(chromedp.CSS(`#edit-program button[type="submit"]`)))
		saved := get(t, alice, 10*time.Second, poll[string](`document.querySelector("h1").textContent === "CONSOLE-EDIT: After" ? "saved" : (document.querySelector("#edit-program .problem") || {}).textContent || null`))
		require.Equal(t, "saved", saved)
		units := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#obs-units")))
		require.Contains(t, units, "2.00 h")
		require.Contains(t, units, "airmass ≤ 2, LST 22–2 h", "the form keeps the constraints it does not edit")
		// an empty title is a problem naming the field, marked invalid
		alice.run(t, 20*time.Second,
			chromedp.Click(chromedp.CSS(`#edit-program-button`)),
			chromedp.Evaluate[chromedp.Void](`void (document.querySelector('#edit-program input[name="title"]').removeAttribute("required"), document.querySelector('#edit-program input[name="title"]').value = "")`),
			chromedp.Click(chromedp.CSS(`#edit-program button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#edit-program .problem`)))
		alice.shot(t, shots, "program-edit")
		bob := newBrowser(t, exe, gwHost, idpHost)
		bob.signIn(t, gw, "bob", "builder")
		bob.goTo(t, fmt.Sprintf("#/programs/%d", created.ID), "#obs-units")
		edits := get(t, bob, 5*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#edit-program-button, #edit-program").length`))
		require.Zero(t, edits, "a viewer gets no Edit button")
	})

	t.Run("a page answered after the reader went on does not replace the page gone to", func(t *testing.T) {
		var created struct {
			ID int64 `json:"id"`
		}
		cs.api(t, "POST", "/observing_program/", cs.JWT(t, "alice"), map[string]any{"short_name": "CONSOLE-SLOW", "title": "Slow", "pi": "A. Alice",
			"status": "active", "obs_units": []map[string]any{}}, 201).JSON(t, &created)
		// the program's answer comes 1.5 s late (the page's own fetch, wrapped); the reader goes
		// to the account page meanwhile
		alice.run(t, 5*time.Second, chromedp.Evaluate[chromedp.Void](`void (() => {
			const slow = "/observing_program/`+fmt.Sprint(created.ID)+`", f = window.fetch;
			window.slowAnswered = false;
			window.fetch = (u, o) => !String(u).includes(slow) ? f(u, o) :
				new Promise((r) => setTimeout(r, 1500)).then(() => f(u, o)).then((resp) => { window.slowAnswered = true; window.fetch = f; return resp; });
		})()`))
		alice.run(t, 5*time.Second, chromedp.Evaluate[chromedp.Void](`void (location.hash = "#/programs/`+fmt.Sprint(created.ID)+`")`))
		alice.goTo(t, "#/account", "#new-token")
		get(t, alice, 10*time.Second, poll[bool](`window.slowAnswered || null`))
		time.Sleep(300 * time.Millisecond) // the late page's answer is read and would be shown
		page := get(t, alice, 5*time.Second, chromedp.Evaluate[string](`location.hash + " " + document.querySelector("h1").textContent + " " + !!document.getElementById("new-token")`))
		require.Equal(t, "#/account Account true", page, "the account page stays; the program's late answer changes nothing")
	})

	t.Run("the live indicator shows reconnecting while transfer is down and recovers", func(t *testing.T) {
		alice.goTo(t, "#/overview", `#live[data-state="live"]`)
		require.NoError(t, cs.Procs["transfer"].Stop(10*time.Second))
		alice.run(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#live[data-state="reconnecting"]`)))
		label := get(t, alice, 5*time.Second, chromedp.Text(chromedp.CSS("#live")))
		require.Equal(t, "reconnecting", label)
		alice.shot(t, shots, "reconnecting")
		p := testenv.Start(t, "transfer", testenv.Binary(t, "transfer"), cs.Env)
		cs.Procs["transfer"] = p
		testenv.WaitReady(t, p, cs.URLs["transfer"]+"/readyz", 30*time.Second)
		alice.run(t, 15*time.Second, chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	})
}
