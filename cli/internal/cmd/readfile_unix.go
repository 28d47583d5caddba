//go:build unix

package cmd

import (
	"io"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fileReader reads whole files with as few system calls as it can: the directory of the last
// file stays open and the next file of the same directory is opened relative to it (openat: the
// kernel resolves one name, not the whole path), then read until end of file and closed. Neither
// the runtime's poller (os.Open tries to register every descriptor) nor a stat (the size is what
// was read) is involved: a small file costs four system calls.
type fileReader struct {
	dir   string // the directory open as dirFD, with its trailing separator
	dirFD int    // -1: none
}

func newFileReader() fileReader { return fileReader{dirFD: -1} }

// readInto writes the whole file at path into w through buf and returns its length.
func (r *fileReader) readInto(path string, buf []byte, w io.Writer) (int64, error) {
	dir, base := filepath.Split(path)
	at := unix.AT_FDCWD
	if dir != "" && base != "" {
		if dir != r.dir {
			r.close()
			fd, err := retryEINTR(func() (int, error) { return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
			if err != nil {
				return 0, &fs.PathError{Op: "open", Path: dir, Err: err}
			}
			r.dir, r.dirFD = dir, fd
		}
		at = r.dirFD
	} else {
		base = path
	}
	fd, err := retryEINTR(func() (int, error) { return unix.Openat(at, base, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var size int64
	for {
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
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

// close closes the directory kept open.
func (r *fileReader) close() {
	if r.dirFD >= 0 {
		_ = unix.Close(r.dirFD)
	}
	r.dir, r.dirFD = "", -1
}

// retryEINTR calls f again while it is interrupted by a signal.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}
