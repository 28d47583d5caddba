//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// idleUsable reports whether an idle upstream connection may carry another request: the upstream
// has neither closed it nor sent anything on it since its last answer (a stray answer would go to
// the next caller). It peeks without blocking, one system call.
func idleUsable(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true // TLS: the record layer would reject stray bytes anyway
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	usable := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		usable = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true // never wait for readability
	})
	return err == nil && usable
}
