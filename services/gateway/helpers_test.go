package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const terminateSignal = syscall.SIGTERM

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// getFrom sends a GET with headers hdr from the given loopback source address (each has its own
// rate budget).
func getFrom(t *testing.T, source, url string, hdr map[string]string) *http.Response {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 2 * time.Second}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

type jsonOperation struct {
	method, path string
	secured      bool
}

// findJSONWriteOperation picks, from the merged document, an operation that takes a JSON body
// (preferring one without security), or returns the zero value when there is none.
func findJSONWriteOperation(t *testing.T, gw string) jsonOperation {
	t.Helper()
	resp, body := do(t, "GET", gw+"/openapi.json", nil, nil)
	require.Equal(t, 200, resp.StatusCode)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody *struct {
				Content map[string]any `json:"content"`
			} `json:"requestBody"`
			Security []any `json:"security"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	var found []jsonOperation
	for p, item := range doc.Paths {
		for m, op := range item {
			if op.RequestBody == nil || op.RequestBody.Content["application/json"] == nil {
				continue
			}
			if m != "post" && m != "put" && m != "patch" {
				continue
			}
			found = append(found, jsonOperation{method: map[string]string{"post": "POST", "put": "PUT", "patch": "PATCH"}[m], path: regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "1"), secured: len(op.Security) > 0})
		}
	}
	if len(found) == 0 {
		return jsonOperation{}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].secured != found[j].secured {
			return !found[i].secured
		}
		return found[i].path+found[i].method < found[j].path+found[j].method
	})
	return found[0]
}

// runWithTimeout runs cmd and returns its standard output, killing it after d.
func runWithTimeout(cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return out.Bytes(), fmt.Errorf("%s did not finish in %s", cmd.Path, d)
	}
}
