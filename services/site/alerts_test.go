package site_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool (syntax, expressions,
// templates) and runs its unit tests (alerts_test.yml: which alerts fire when). promtool comes
// from Debian's prometheus package, which `deploy/local/stack.sh deps` (run by make test)
// installs; the test fails rather than skips without it.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is missing: run deploy/local/stack.sh deps (apt-get install prometheus)")
	dir := filepath.Join(testenv.RepoRoot(t), "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
		t.Logf("promtool %v:\n%s", args, out)
	}
}
