package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Test ports come from a range the kernel never hands out by itself (below Linux's ephemeral
// range, 32768-60999 by default), so no bind to port 0 and no outgoing connection elsewhere on
// the machine can take a port between FreeAddr choosing it and the server binding it. Test
// processes running at the same time (go test runs packages in parallel) coordinate through a
// lock file per port: whoever holds the lock owns the port until its test ends.
const (
	portRangeStart = 20000
	portRangeSize  = 12000
)

// FreeAddr returns a loopback address whose port is free and reserved for the calling test until
// it ends: no other test using testenv (in this or another test process) gets it meanwhile, and
// the kernel does not assign it to anyone either (see portRangeStart).
func FreeAddr(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "obsops-testenv-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("testenv: port lock directory: %v", err)
	}
	for range 1000 {
		port := portRangeStart + rand.IntN(portRangeSize)
		f, ok := lockPort(dir, port)
		if !ok {
			continue
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		l, err := net.Listen("tcp", addr)
		if err != nil { // something outside the tests uses it
			_ = f.Close()
			continue
		}
		_ = l.Close()
		t.Cleanup(func() { _ = f.Close() }) // closing releases the lock
		return addr
	}
	t.Fatalf("testenv: no free port in %d-%d", portRangeStart, portRangeStart+portRangeSize-1)
	return ""
}

// lockPort takes the exclusive lock on port's lock file without waiting. The lock belongs to the
// open file, so it is released when the file is closed or the process ends (also by a crash).
func lockPort(dir string, port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.lock", port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
}
