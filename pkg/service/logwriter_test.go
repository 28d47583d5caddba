package service

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hand-written access line must stay byte for byte what slog's JSON handler writes.
func TestAccessLineMatchesSlog(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.FixedZone("x", 3600))
	for _, l := range []accessLine{
		{time: at, level: slog.LevelInfo, requestID: "abc-1", method: "GET", path: "/api/site/info", route: "/api/site/*", status: 200, duration: 1234 * time.Microsecond, bytesOut: 57, client: "127.0.0.1"},
		{time: at, level: slog.LevelError, requestID: "x", method: "POST", path: "/a\"b\\c\n\x01<&>é\u2028\xff", route: "unmatched", status: 502, duration: 0, bytesOut: 0, client: "::1"},
		{time: time.Now(), level: slog.LevelDebug, path: "/healthz", route: "/healthz", status: 200, duration: 3 * time.Second},
	} {
		var want bytes.Buffer
		h := slog.New(slog.NewJSONHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})).With("service", "site").Handler()
		r := slog.NewRecord(l.time, l.level, "request", 0)
		r.AddAttrs(
			slog.String("request_id", l.requestID), slog.String("method", l.method), slog.String("path", l.path),
			slog.String("route", l.route), slog.Int("status", l.status),
			slog.Float64("duration_ms", float64(l.duration.Microseconds())/1000),
			slog.Int("bytes_out", l.bytesOut), slog.String("client", l.client),
		)
		require.NoError(t, h.Handle(context.Background(), r))
		require.Equal(t, want.String(), string(appendAccessLine(nil, []byte(`"site"`), &l)))
	}
}

// Access lines wait for the flush; any other line goes out at once, after them.
func TestLogWriterKeepsOrder(t *testing.T) {
	var out bytes.Buffer
	w := newLogWriter(&out)
	w.buffer([]byte("a\n"), false)
	w.buffer([]byte("b\n"), false)
	require.Empty(t, out.String())
	_, err := w.Write([]byte("c\n"))
	require.NoError(t, err)
	require.Equal(t, "a\nb\nc\n", out.String())
	w.buffer([]byte("d\n"), true)
	require.Equal(t, "a\nb\nc\nd\n", out.String())
	w.buffer([]byte("e\n"), false)
	w.flush()
	require.Equal(t, "a\nb\nc\nd\ne\n", out.String())
}
