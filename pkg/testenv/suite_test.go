package testenv_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestEveryBinaryRejectsBadConfigInOneLine: a wrong value stops a binary at start with one line
// naming the variable, and exit status 1.
func TestEveryBinaryRejectsBadConfigInOneLine(t *testing.T) {
	cases := []struct{ env, value, want string }{
		{"OPS_DB_MAX_CONNS", "many", `OPS_DB_MAX_CONNS: invalid value "many": expected an integer`},
		{"OPS_SITE_TYPE", "moon", `OPS_SITE_TYPE: invalid value "moon": must be one of main, secondary`},
		{"OPS_SHUTDOWN_DRAIN", "later", `OPS_SHUTDOWN_DRAIN: invalid value "later"`},
	}
	for _, name := range testenv.SuiteServices() {
		bin := testenv.Binary(t, name)
		for _, tc := range cases {
			t.Run(name+"/"+tc.env, func(t *testing.T) {
				cmd := exec.Command(bin)
				cmd.Env = []string{tc.env + "=" + tc.value, "OPS_DATABASE_URL=postgres://x@127.0.0.1:1/x"}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit)
				require.Equal(t, 1, exit.ExitCode())
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				require.Len(t, lines, 1, "one line: %s", out)
				require.Contains(t, lines[0], tc.want)
			})
		}
	}
}

func TestIngestRoles(t *testing.T) {
	bin := testenv.Binary(t, "ingest")
	out, err := exec.Command(bin, "-role", "everything").CombinedOutput()
	require.Error(t, err)
	require.Equal(t, `ingest: -role: invalid value "everything": must be one of api, worker, all`, strings.TrimSpace(string(out)))

	db, rds := testenv.Database(t), testenv.Redis(t)
	for role, wantWorker := range map[string]bool{"api": false, "worker": true, "all": true} {
		t.Run(role, func(t *testing.T) {
			addr := testenv.FreeAddr(t)
			p := testenv.Start(t, "ingest-"+role, bin, map[string]string{
				"OPS_DATABASE_URL": db, "OPS_REDIS_URL": rds.URL, "OPS_INGEST_ADDR": addr, "OPS_SHUTDOWN_DRAIN": "0s",
			}, "-role", role)
			testenv.WaitReady(t, p, "http://"+addr+"/readyz", 20*time.Second)
			resp, err := http.Get("http://" + addr + "/readyz")
			require.NoError(t, err)
			defer resp.Body.Close()
			var r service.Readiness
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
			_, hasWorker := r.Checks["worker"]
			require.Equal(t, wantWorker, hasWorker, "the worker role runs the queue server")
			require.NoError(t, p.Stop(10*time.Second), "SIGTERM ends the process cleanly")
		})
	}
}

func TestSIGTERMStopsEveryServiceCleanly(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	for _, name := range testenv.SuiteServices() {
		start := time.Now()
		require.NoError(t, s.Procs[name].Stop(10*time.Second), "%s exits 0 on SIGTERM", name)
		require.Less(t, time.Since(start), 8*time.Second, name)
		require.Contains(t, s.Procs[name].Output(), `"msg":"stopped"`, name)
	}
}

func TestSuiteAddressOverrideMovesTheURL(t *testing.T) {
	addr := testenv.FreeAddr(t)
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_SITE_ADDR": addr}})
	require.Equal(t, "http://"+addr, s.URLs["site"])
	require.Equal(t, "http://"+addr, s.Env["OPS_SITE_URL"], "the other services are pointed at the moved address")
	resp, err := http.Get(s.GatewayURL + "/api/site/info")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the gateway reaches the site at its moved address")
}
