//go:build !unix

package cmd

import (
	"io"
	"os"
)

// readInto writes the whole file at path into w through buf and returns its length.
func readInto(path string, buf []byte, w io.Writer) (int64, error) {
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
