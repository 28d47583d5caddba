package live

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hand-written heartbeat is the JSON a marshalled one would be.
func TestAppendHeartbeatIsJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	want, err := json.Marshal(map[string]any{"type": "heartbeat", "seq": int64(42), "at": at.UTC()})
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(appendHeartbeat(nil, 42, at)))
}
