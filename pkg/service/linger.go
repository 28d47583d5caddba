package service

import (
	"io"
	"net"
	"sync"
	"time"
)

// Lingering close bounds: how long and how much a closing connection keeps reading.
const (
	lingerTimeout  = 2 * time.Second
	lingerMaxBytes = 64 << 20
)

// lingerListener gives every accepted connection a lingering close, as Apache and nginx do: on
// Close it sends FIN, then reads and discards what the client still sends for a moment before
// closing. Without it a server that answers before reading the whole request (413 for an
// oversize body) closes with unread data, the kernel resets the connection, and the client
// often loses the answer ("broken pipe" instead of the 413 problem).
type lingerListener struct{ net.Listener }

// Accept returns the next connection, with a lingering close when it is TCP.
func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

type lingerConn struct {
	*net.TCPConn
	once sync.Once
}

// Close sends FIN at once and closes the socket after the lingering read, in the background.
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		if err := c.TCPConn.CloseWrite(); err != nil {
			_ = c.TCPConn.Close()
			return
		}
		go func() {
			_ = c.TCPConn.SetReadDeadline(time.Now().Add(lingerTimeout))
			_, _ = io.CopyN(io.Discard, c.TCPConn, lingerMaxBytes)
			_ = c.TCPConn.Close()
		}()
	})
	return nil
}
