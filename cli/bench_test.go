package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/cli/internal/cmd"
)

// benchFileID is `ingest register`'s id scheme (a version 8 UUID from execution, module and path),
// so the plain client's requests carry the same kind of ids as the command's.
func benchFileID(execution string, module int64, path string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("obsops-register\x00%s\x00%d\x00%s", execution, module, path)))
	b := h[:16]
	b[6] = (b[6] & 0x0f) | 0x80
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// verdict is PASS when ratio reaches target, MISS otherwise.
func verdict(ratio, target float64) string {
	if ratio >= target {
		return "PASS"
	}
	return "MISS"
}

// TestBenchCLIRegister measures `obsops ingest register DIR` of N small files already on disk
// (OPS_BENCH_CLI_FILES, default 100,000) through the gateway, end to end in files/s, next to a
// plain Go client sending the same kind of bulk bodies in the same run: target >= 80%.
//
// The comparison is fair both ways. The client's bodies are prepared beforehand (checksums
// included, outside its timing) and it sends them with as many requests outstanding at once as
// the command (cmd.DefaultRegisterInFlight), 1,000 files a request, the same id and path scheme;
// the command is timed as a user sees it: process start, walk, checksums, state file (synced),
// requests. Both run against a stack warmed by an unmeasured registration, each starts only
// once the buffer's worker has applied every row of the one before (neither pays for the other's
// background work), and they run twice in the order command, client, client, command (the second
// command run on a tree of hard links to the same files): the ratio is of the totals, so a load
// that drifts during the run, on a shared machine, weighs on both alike.
//
// Then the command's checksummer (cmd.Checksummer, one goroutine) in MB/s on the same files next
// to xxhsum -H1 (xxh64) and sha256sum (one process each): target >= 80%; a missing tool is skipped
// with a message. Run by `make bench` (OPS_BENCH=1); skipped otherwise.
func TestBenchCLIRegister(t *testing.T) {
	if os.Getenv("OPS_BENCH") != "1" {
		t.Skip("benchmark: run with OPS_BENCH=1 (make bench)")
	}
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("OPS_BENCH_CLI_FILES")); err == nil && v > 0 {
		n = v
	}
	st := startStack(t)
	e := newCLIEnv(t, st)
	ou, tok := e.ensureInstrument(t)
	env := map[string]string{"OBSOPS_URL": st.GatewayURL, "OBSOPS_TOKEN": tok}
	start := func() string {
		out := e.ok(t, env, "ingest", "start", "--obs-unit", fmt.Sprint(ou), "--module", "11", "-o", "json")
		var started struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &started))
		return started.ID
	}

	// N small files (100–1,099 bytes), 1,000 to a directory; the command's second run registers
	// a second tree of hard links to them (a path is unique per module: another root, cl2).
	dir, dir2 := t.TempDir(), t.TempDir()
	paths := make([]string, n)
	var total int64
	for i := range n {
		rel := fmt.Sprintf("cli/d%04d/f%07d.dat", i/1000, i)
		full := filepath.Join(dir, filepath.FromSlash(rel))
		full2 := filepath.Join(dir2, "cl2"+filepath.FromSlash(strings.TrimPrefix(rel, "cli")))
		if i%1000 == 0 {
			require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Dir(full2), 0o755))
		}
		body := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i%1000)
		require.NoError(t, os.WriteFile(full, body, 0o644))
		require.NoError(t, os.Link(full, full2))
		paths[i] = rel
		total += int64(len(body))
	}

	sums := cmd.NewChecksummer()
	defer sums.Close()
	type wire struct {
		ID                 string `json:"id"`
		ExecutedObsUnitID  string `json:"executed_obs_unit_id"`
		InstrumentModuleID int64  `json:"instrument_module_id"`
		Path               string `json:"path"`
		SizeBytes          int64  `json:"size_bytes"`
		Checksum           string `json:"checksum"`
	}
	// prepare is the plain client's bodies for files [lo, hi) under root (a path is unique per
	// module: the same files under another root of the same length), 1,000 files a body.
	prepare := func(exec, root string, lo, hi int) [][]byte {
		var bodies [][]byte
		for lo0 := lo; lo0 < hi; lo0 += 1000 {
			var files []wire
			for i := lo0; i < min(hi, lo0+1000); i++ {
				sum, err := sums.Sum(filepath.Join(dir, filepath.FromSlash(paths[i])), "xxh64")
				require.NoError(t, err)
				p := root + strings.TrimPrefix(paths[i], "cli")
				files = append(files, wire{ID: benchFileID(exec, 11, p), ExecutedObsUnitID: exec, InstrumentModuleID: 11,
					Path: p, SizeBytes: int64(100 + i%1000), Checksum: sum})
			}
			b, err := json.Marshal(map[string]any{"files": files})
			require.NoError(t, err)
			bodies = append(bodies, b)
		}
		return bodies
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	// send posts the bodies with inFlight requests outstanding at once, as the command does.
	send := func(exec string, bodies [][]byte) {
		next := make(chan int)
		errs := make(chan error, len(bodies))
		var wg sync.WaitGroup
		for range cmd.DefaultRegisterInFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					req, err := http.NewRequest(http.MethodPost, st.GatewayURL+"/raw_data_files/bulk", bytes.NewReader(bodies[i]))
					if err != nil {
						errs <- err
						continue
					}
					req.Header.Set("Authorization", "Bearer "+tok)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%s-%d", exec, i))
					resp, err := hc.Do(req)
					if err != nil {
						errs <- err
						continue
					}
					msg, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode >= 300 {
						errs <- fmt.Errorf("bulk request %d: %d %s", i, resp.StatusCode, msg)
					}
				}
			}()
		}
		for i := range bodies {
			next <- i
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	// applied waits until the buffer's worker has written want rows of exec (so that neither
	// measurement runs while the other's registrations are still being applied).
	applied := func(exec string, want int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for {
			var got int
			require.NoError(t, e.db.QueryRowContext(ctx, `SELECT count(*) FROM raw_data_files WHERE executed_obs_unit_id = $1`, exec).Scan(&got))
			if got >= want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Warm-up, unmeasured: the plain client registers 2,000 of the files under a third root, so
	// that neither measurement pays for the stack's first requests.
	warmExec := start()
	send(warmExec, prepare(warmExec, "wrm", 0, min(n, 2000)))
	applied(warmExec, min(n, 2000))

	// The command, end to end: walk, checksum, bulk requests through the gateway.
	register := func(dir string) (time.Duration, time.Duration) {
		exec := start()
		c := e.cmd(env, "ingest", "register", dir, "--execution", exec, "--module", "11", "--no-receipts",
			"--state", filepath.Join(t.TempDir(), "state.jsonl"))
		var stderr bytes.Buffer
		c.Stderr = &stderr
		t0 := time.Now()
		require.NoError(t, c.Run(), stderr.String())
		d := time.Since(t0)
		require.Contains(t, stderr.String(), fmt.Sprintf("%d files registered", n))
		applied(exec, n)
		return d, c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	// The baseline: a plain Go client, bodies prepared beforehand (checksums included).
	baseline := func(root string) time.Duration {
		exec := start()
		bodies := prepare(exec, root, 0, n)
		t0 := time.Now()
		send(exec, bodies)
		d := time.Since(t0)
		applied(exec, n)
		return d
	}
	// Command, client, client, command: a load that drifts during the run weighs on both alike.
	cli1, cpu1 := register(dir)
	base1 := baseline("bas")
	base2 := baseline("bs2")
	cli2, cpu2 := register(dir2)
	for i, m := range []struct{ cli, cpu, base time.Duration }{{cli1, cpu1, base1}, {cli2, cpu2, base2}} {
		t.Logf("ingest register %d files, pair %d: obsops %.0f files/s (%.2f s, %.2f s of CPU), plain Go client %.0f files/s (%.2f s), ratio %.2f",
			n, i+1, float64(n)/m.cli.Seconds(), m.cli.Seconds(), m.cpu.Seconds(), float64(n)/m.base.Seconds(), m.base.Seconds(), m.base.Seconds()/m.cli.Seconds())
	}
	cliRate, baseRate := float64(2*n)/(cli1+cli2).Seconds(), float64(2*n)/(base1+base2).Seconds()
	t.Logf("ingest register %d files, both pairs: obsops %.0f files/s, plain Go client %.0f files/s, ratio %.2f (target >= 0.80): %s",
		n, cliRate, baseRate, cliRate/baseRate, verdict(cliRate/baseRate, 0.8))
	// Not the target, a reading aid: the plain client once more while the same files are
	// checksummed alongside, as the command does (its default workers, cmd.Checksummer): on a
	// machine the stack saturates, the checksums' CPU is taken from the server whoever computes
	// them, and this says how much of the gap that is.
	alongside := func(root string) time.Duration {
		exec := start()
		bodies := prepare(exec, root, 0, n)
		next := make(chan int, 1000)
		var wg sync.WaitGroup
		for range max(2, runtime.NumCPU()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := cmd.NewChecksummer()
				defer c.Close()
				for i := range next {
					_, _ = c.Sum(filepath.Join(dir, filepath.FromSlash(paths[i])), "xxh64")
				}
			}()
		}
		t0 := time.Now()
		go func() {
			for i := range n {
				next <- i
			}
			close(next)
		}()
		send(exec, bodies)
		d := time.Since(t0)
		wg.Wait()
		applied(exec, n)
		return d
	}
	base3 := alongside("bs3")
	t.Logf("reading aid: the plain Go client with the same files checksummed alongside %.0f files/s (%.2f s); obsops / that %.2f",
		float64(n)/base3.Seconds(), base3.Seconds(), cliRate/(float64(n)/base3.Seconds()))

	// The checksummer on the same (now cached) files, one at a time, against the tools.
	mb := float64(total) / 1e6
	for _, c := range []struct{ alg, tool string }{{"xxh64", "xxhsum"}, {"sha256", "sha256sum"}} {
		t0 := time.Now()
		for _, p := range paths {
			_, err := sums.Sum(filepath.Join(dir, filepath.FromSlash(p)), c.alg)
			require.NoError(t, err)
		}
		ours := mb / time.Since(t0).Seconds()
		bin, err := exec.LookPath(c.tool)
		if err != nil {
			t.Logf("checksum %s: obsops %.1f MB/s over %d files (%.1f MB); %s not installed: no comparison (Debian package %s)",
				c.alg, ours, n, mb, c.tool, map[string]string{"xxhsum": "xxhash", "sha256sum": "coreutils"}[c.tool])
			continue
		}
		args := []string{"-0", bin}
		if c.tool == "xxhsum" {
			args = append(args, "-H1") // XXH64
		}
		x := exec.Command("xargs", args...)
		x.Dir = dir
		x.Stdin = strings.NewReader(strings.Join(paths, "\x00"))
		var out bytes.Buffer
		x.Stdout = &out
		t0 = time.Now()
		require.NoError(t, x.Run())
		theirs := mb / time.Since(t0).Seconds()
		require.Equal(t, n, strings.Count(out.String(), "\n"))
		// The same digests: the first file's, both ways.
		sum, err := sums.Sum(filepath.Join(dir, filepath.FromSlash(paths[0])), c.alg)
		require.NoError(t, err)
		first := strings.Fields(strings.SplitN(out.String(), "\n", 2)[0])[0]
		require.Equal(t, strings.TrimPrefix(sum, c.alg+":"), first, "%s and the checksummer agree", c.tool)
		t.Logf("checksum %s over %d files (%.1f MB): obsops %.1f MB/s, %s %.1f MB/s, ratio %.2f (target >= 0.80): %s",
			c.alg, n, mb, ours, c.tool, theirs, ours/theirs, verdict(ours/theirs, 0.8))
	}
}
