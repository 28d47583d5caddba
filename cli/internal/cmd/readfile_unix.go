//go:build unix

package cmd

import (
	"io"
	"io/fs"
	"syscall"
)

// readInto writes the whole file at path into w through buf and returns its length: open, read
// until end of file, close, and nothing else (os.Open would also try to register the descriptor
// with the runtime's poller, one more system call per file, and the caller needs no stat).
func readInto(path string, buf []byte, w io.Writer) (int64, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var size int64
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n <= 0 {
			return size, nil
		}
		_, _ = w.Write(buf[:n])
		size += int64(n)
	}
}
