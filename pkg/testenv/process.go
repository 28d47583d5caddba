package testenv

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const terminate = syscall.SIGTERM

// Binary returns the path of an obsops binary: from OPS_BIN_DIR when set (`make test` builds
// ./bin first), otherwise built once per test process from the workspace.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv("OPS_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	builtMu.Lock()
	defer builtMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	root := RepoRoot(t)
	src := filepath.Join(root, "services", name)
	if name == "migrate" {
		src = filepath.Join(root, "migrations")
	}
	out := filepath.Join(os.TempDir(), "obsops-testbin-"+randomHex(4), name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: build %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

// built caches binaries compiled on demand, once per test process (a test helper's cache, not
// application state).
var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// Process is one running obsops binary under test.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Start runs binary with args and the given OPS_* environment, and stops it (SIGTERM) when the
// test ends. Its output is printed if the test fails. A service connects as itself
// (ServiceCredentials): its own PostgreSQL role and Redis user, so a grant or ACL rule it lacks
// fails the test as it would fail in production.
func Start(t testing.TB, name, binary string, env map[string]string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = envList(os.Environ(), ServiceCredentials(t, filepath.Base(binary), env))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, p.Output())
		}
	})
	return p
}

// PeakRSS is the most resident memory the process has used so far (VmHWM of /proc/PID/status,
// in bytes), for tests that a request does not make a service grow.
func (p *Process) PeakRSS(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("testenv: %s: %v", p.Name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("testenv: %s: VmHWM %q: %v", p.Name, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("testenv: %s: no VmHWM in /proc status", p.Name)
	return 0
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to grace before killing; it returns the exit error.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(terminate)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Exited reports whether the process has ended, and its error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait blocks until the process ends or the timeout passes.
func (p *Process) Wait(timeout time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(timeout):
		return false, nil
	}
}

// Output is everything the process has written so far.
func (p *Process) Output() string { return p.out.String() }

// WaitReady polls url until it answers 200, failing the test after timeout or if p exits.
func WaitReady(t testing.TB, p *Process, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	last := ""
	for time.Now().Before(deadline) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("testenv: %s exited (%v) before ready:\n%s", p.Name, err, p.Output())
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("status %d", resp.StatusCode)
		} else {
			last = err.Error()
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("testenv: %s not ready at %s after %s (%s):\n%s", p.Name, url, timeout, last, p.Output())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 8<<20 { // keep memory bounded for chatty processes
		s.b.Reset()
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
