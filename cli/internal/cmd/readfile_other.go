//go:build !unix

package cmd

import (
	"io"
	"os"
)

// fileReader reads whole files (os.Open, read until end of file).
type fileReader struct{}

func newFileReader() fileReader { return fileReader{} }

// readInto writes the whole file at path into w through buf and returns its length.
func (fileReader) readInto(path string, buf []byte, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var size int64
	for {
		n, err := f.Read(buf)
		_, _ = w.Write(buf[:n])
		size += int64(n)
		if err == io.EOF {
			return size, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// close does nothing: no directory is kept open.
func (fileReader) close() {}
