package database_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestMainPoolFailsFastAndRecovers: a secondary site's pool on the main database, through a
// proxy standing for the WAN. Cut (connections dropped, new ones refused): a write fails with
// ErrMainUnreachable at once and the link is down; while it is known down a write does not even
// try. Restored: the probe finds it within about a second and writes work. Silently dropping
// traffic (the worst WAN): a write still ends within the timeout, never hangs.
func TestMainPoolFailsFastAndRecovers(t *testing.T) {
	dsn := testenv.Database(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	wan := toxiproxy.NewProxy(srv, "wan", "127.0.0.1:0", u.Host)
	require.NoError(t, wan.Start())
	t.Cleanup(wan.Stop)
	u.Host = wan.Listen

	const timeout = 500 * time.Millisecond
	reg := prometheus.NewRegistry()
	link, db, err := database.OpenMain(u.String(), 4, timeout, reg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go link.Run(ctx)

	write := func() (time.Duration, error) {
		start := time.Now()
		_, err := db.ExecContext(context.Background(), `INSERT INTO wan_probe VALUES (1)`)
		return time.Since(start), err
	}
	_, err = db.Exec(`CREATE TABLE wan_probe (x int)`)
	require.NoError(t, err)
	_, err = write()
	require.NoError(t, err)
	require.True(t, link.Status().Reachable)

	wan.Stop()
	took, err := write()
	require.True(t, database.MainUnreachable(err), "error: %v", err)
	require.Less(t, took, timeout)
	st := link.Status()
	require.False(t, st.Reachable)
	require.NotEmpty(t, st.LastError)
	took, err = write()
	require.ErrorIs(t, err, database.ErrMainUnreachable)
	require.Less(t, took, 20*time.Millisecond, "known down: no network wait")

	require.NoError(t, wan.Start())
	require.Eventually(t, func() bool { return link.Status().Reachable }, 3*time.Second, 20*time.Millisecond)
	_, err = write()
	require.NoError(t, err, "the first write after the WAN returned works (stale connections were let go)")

	// Traffic dropped without a trace: the write ends within the timeout (a read deadline).
	_, err = wan.Toxics.AddToxicJson(strings.NewReader(`{"name":"drop","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`))
	require.NoError(t, err)
	took, err = write()
	require.True(t, database.MainUnreachable(err), "error: %v", err)
	require.Less(t, took, timeout+300*time.Millisecond)
	require.False(t, link.Status().Reachable)
	require.NoError(t, wan.Toxics.RemoveToxic(context.Background(), "drop"))
	require.Eventually(t, func() bool { return link.Status().Reachable }, 5*time.Second, 20*time.Millisecond)
	_, err = write()
	require.NoError(t, err)
}

// TestRefusingPoolAnswersWriteAtMainSite: every statement on a secondary's refusing write pool
// fails, without connecting anywhere, with the 409 write_at_main_site problem naming both sites,
// wrapped or not.
func TestRefusingPoolAnswersWriteAtMainSite(t *testing.T) {
	db := database.RefusingPool(database.WriteAtMainSite("observatory", "datacentre"))
	defer db.Close()
	_, err := db.ExecContext(context.Background(), `INSERT INTO sources (name) VALUES ('x')`)
	if !database.AtMainOnly(err) || !database.AtMainOnly(fmt.Errorf("create source: %w", err)) {
		t.Fatalf("got %v, want the write_at_main_site problem", err)
	}
	p := problem.From(fmt.Errorf("wrapped: %w", err))
	if p.Status != 409 || p.Type != "urn:obsops:problem:write_at_main_site" ||
		!strings.Contains(p.Detail, `the main site "datacentre"`) || !strings.Contains(p.Detail, `"observatory" is a secondary site`) {
		t.Fatalf("problem %+v", p)
	}
	if _, err := db.BeginTxx(context.Background(), nil); !database.AtMainOnly(err) {
		t.Fatalf("a transaction: %v", err)
	}
	if database.AtMainOnly(database.ErrMainUnreachable) || database.AtMainOnly(nil) {
		t.Fatal("other errors are not write_at_main_site")
	}
}
