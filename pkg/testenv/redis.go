package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a private redis-server for one test, configured like production's buffer Redis
// (AOF with fsync every second, noeviction).
type RedisServer struct {
	URL  string
	Addr string
	dir  string
	cmd  *exec.Cmd
	t    testing.TB
}

// Redis starts a private Redis and returns it; it is stopped when the test ends.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testenv: redis-server not installed (run tests with `make test`, which installs it)")
	}
	r := &RedisServer{Addr: FreeAddr(t), dir: t.TempDir(), t: t}
	r.URL = "redis://" + r.Addr + "/0"
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start (re)starts the server on the same address and data directory, so a restart after Kill
// shows what an AOF-backed Redis keeps across a crash.
func (r *RedisServer) Start() {
	r.t.Helper()
	_, port, _ := strings.Cut(r.Addr, ":")
	r.cmd = exec.Command("redis-server",
		"--port", port, "--bind", "127.0.0.1", "--dir", r.dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("testenv: start redis: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("testenv: redis on %s did not start", r.Addr)
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (r *RedisServer) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Stop shuts the server down.
func (r *RedisServer) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(terminate)
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-done
		}
		r.cmd = nil
	}
}

// Client returns a go-redis client for the server, closed when the test ends.
func (r *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *RedisServer) String() string { return fmt.Sprintf("redis %s", r.Addr) }
