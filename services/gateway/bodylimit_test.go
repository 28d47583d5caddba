package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestOversizeBodyAlways413 sends many oversize bodies through the real gateway binary: each must
// get the 413 problem, never a reset connection. fasthttp answers 413 before reading the body and
// closes; without the chassis' lingering close the kernel resets the connection and a client that
// is still sending loses the answer (about one request in ten here).
func TestOversizeBodyAlways413(t *testing.T) {
	fake := fakeTransfer(t)
	addr := testenv.FreeAddr(t)
	p := testenv.Start(t, "gateway", testenv.Binary(t, "gateway"), map[string]string{
		"OPS_GATEWAY_ADDR": addr, "OPS_GATEWAY_METRICS_ADDR": testenv.FreeAddr(t), "OPS_TRANSFER_URL": fake, "OPS_RATE_LIMIT_PER_MINUTE": "0",
		"OPS_BODY_LIMIT_BYTES": "4096", "OPS_LOG_LEVEL": "warn",
		"OPS_REDIS_URL": "redis://" + testenv.FreeAddr(t) + "/0", // not needed without rate limiting
	})
	testenv.WaitReady(t, p, "http://"+addr+"/readyz", 30*time.Second)
	c := &http.Client{Timeout: 10 * time.Second}
	for _, size := range []int{64 << 10, 1 << 20} {
		body := bytes.Repeat([]byte("x"), size)
		for i := range 100 {
			resp, err := c.Post("http://"+addr+"/api/transfer/echo", "application/json", bytes.NewReader(body))
			require.NoError(t, err, "size %d, request %d", size, i+1)
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, 413, resp.StatusCode, "%s", b)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var pb problemBody
			require.NoError(t, json.Unmarshal(b, &pb))
			require.Equal(t, 413, pb.Status)
		}
	}
}
