package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreeAddrReservesPorts: every address is distinct, outside the kernel's ephemeral range, and
// locked for the test, so another test process cannot be handed the same port meanwhile.
func TestFreeAddrReservesPorts(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		addr := FreeAddr(t)
		require.False(t, seen[addr], "handed out twice: %s", addr)
		seen[addr] = true
		port, err := strconv.Atoi(strings.TrimPrefix(addr, "127.0.0.1:"))
		require.NoError(t, err)
		require.True(t, port >= portRangeStart && port < portRangeStart+portRangeSize, port)
		_, ok := lockPort(filepath.Join(os.TempDir(), "obsops-testenv-ports"), port)
		require.False(t, ok, "port %d is locked while the test runs", port)
	}
}

// TestRedisStartRefusesAnotherServer: when the chosen port is taken by another Redis, start
// reports the failed start instead of taking the other server for its own (the flake where two
// tests shared one Redis).
func TestRedisStartRefusesAnotherServer(t *testing.T) {
	other := Redis(t)
	r := &RedisServer{Addr: other.Addr, dir: t.TempDir(), t: t}
	err := r.start()
	require.Error(t, err)
	require.Contains(t, err.Error(), "exited at start")
	require.Nil(t, r.cmd)
}
