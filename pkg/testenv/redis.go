package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/redisacl"
)

// RedisServer is a private redis-server for one test, configured like production's buffer Redis
// (AOF fsynced before every reply, noeviction).
type RedisServer struct {
	URL    string
	Addr   string
	dir    string
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed when cmd has exited
	t      testing.TB
}

// Redis starts a private Redis and returns it; it is stopped when the test ends.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testenv: redis-server not installed (run tests with `make test`, which installs it)")
	}
	r := &RedisServer{dir: t.TempDir(), t: t}
	t.Cleanup(r.Stop)
	for attempt := 1; ; attempt++ {
		r.Addr = FreeAddr(t)
		r.URL = "redis://" + r.Addr + "/0"
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 5 {
			t.Fatalf("testenv: %v", err)
		}
		t.Logf("testenv: %v; trying another port", err)
	}
}

// Start (re)starts the server on the same address and data directory, so a restart after Kill
// shows what an AOF-backed Redis keeps across a crash.
func (r *RedisServer) Start() {
	r.t.Helper()
	var err error
	for range 5 { // the port stays reserved for this test, but the old socket may linger a moment
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.t.Fatalf("testenv: %v", err)
}

// start runs redis-server on r.Addr and waits until it answers. The server that answers must be
// this process (INFO's process_id): if the port was taken, redis-server exits and some other
// server may be listening there, which must never be mistaken for ours.
func (r *RedisServer) start() error {
	_, port, _ := strings.Cut(r.Addr, ":")
	cmd := exec.Command("redis-server",
		"--port", port, "--bind", "127.0.0.1", "--dir", r.dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "400", "--auto-aof-rewrite-min-size", "512mb", "--maxmemory-policy", "noeviction",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	want := "process_id:" + strconv.Itoa(cmd.Process.Pid) + "\r\n"
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("redis on %s exited at start: %s", r.Addr, lastLine(string(log)))
		default:
		}
		if info, err := c.Info(context.Background(), "server").Result(); err == nil && strings.Contains(info, want) {
			// The services' ACL users (pkg/redisacl), again at every start: Redis keeps them in memory only.
			if err := redisacl.Apply(context.Background(), c, RedisPasswords()); err != nil {
				_ = cmd.Process.Kill()
				<-exited
				return fmt.Errorf("redis on %s: %w", r.Addr, err)
			}
			r.cmd, r.exited = cmd, exited
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis on %s did not start", r.Addr)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (r *RedisServer) Kill() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		<-r.exited
		r.cmd = nil
	}
}

// Pause stops the server without closing anything (SIGSTOP): connections stay open and
// connects are still accepted by the kernel, but nothing is answered — a hung Redis, which only
// a client's own timeouts notice. Resume undoes it; the test's end resumes it before stopping.
func (r *RedisServer) Pause() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume lets a paused server run again (SIGCONT).
func (r *RedisServer) Resume() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Stop shuts the server down.
func (r *RedisServer) Stop() {
	if r.cmd != nil {
		r.Resume() // a paused server cannot act on SIGTERM
		_ = r.cmd.Process.Signal(terminate)
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		r.cmd = nil
	}
}

// UserClient returns a go-redis client for the server that authenticates as the ACL user name
// (pkg/redisacl), closed when the test ends.
func (r *RedisServer) UserClient(name string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Username: name, Password: RedisPassword(name)})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a go-redis client for the server as its default user (every permission), closed
// when the test ends.
func (r *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *RedisServer) String() string { return fmt.Sprintf("redis %s", r.Addr) }
