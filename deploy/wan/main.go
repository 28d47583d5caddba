// Command wan is the WAN of the local two-site stack (`make up-sites`): a TCP proxy, named
// "wan", through which every connection from the secondary site to the main site's PostgreSQL
// passes (the replica's WAL streaming, the ingest worker's replay, other services' writes), and,
// with -observatory-listen, one named "wan-observatory" the other way, through which the main
// site's site service polls the observatory's /buffer-stats (OPS_OBSERVATORY_STATUS_URL). It is
// toxiproxy (github.com/Shopify/toxiproxy/v2) used as a library, with toxiproxy's own HTTP API,
// so `make wan-down` / `wan-up` / `wan-slow` and the fault tests control it the same way:
//
//	POST /proxies/wan {"enabled": false}   cut: open connections dropped, new ones refused
//	POST /proxies/wan {"enabled": true}    restore
//	POST /proxies/wan/toxics {...}         latency, loss, … (toxiproxy's toxics)
//
// A program of our own rather than toxiproxy-server only so that `make build` builds it from
// go.mod-pinned sources and the proxy exists from the first moment (no creation step).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

func main() {
	api := flag.String("api", "127.0.0.1:58474", "listen address of toxiproxy's HTTP API")
	listen := flag.String("listen", "127.0.0.1:55442", "where the secondary site connects (the WAN's near end)")
	upstream := flag.String("upstream", "127.0.0.1:55432", "the main site's PostgreSQL (the WAN's far end)")
	name := flag.String("name", "wan", "the proxy's name in the API")
	obsListen := flag.String("observatory-listen", "", "where the main site reaches the observatory's gateway (empty: no such proxy)")
	obsUpstream := flag.String("observatory-upstream", "", "the observatory's gateway (the far end of -observatory-listen)")
	flag.Parse()
	proxies := []proxySpec{{*name, *listen, *upstream}}
	if *obsListen != "" {
		proxies = append(proxies, proxySpec{*name + "-observatory", *obsListen, *obsUpstream})
	}
	if err := run(*api, proxies); err != nil {
		fmt.Fprintln(os.Stderr, "wan:", err)
		os.Exit(1)
	}
}

// proxySpec is one proxy of the WAN: its name in the API, where it listens, where it forwards.
type proxySpec struct{ name, listen, upstream string }

// run serves the proxies and the API until SIGTERM or SIGINT.
func run(api string, proxies []proxySpec) error {
	logger := zerolog.New(os.Stderr).With().Timestamp().Logger().Level(zerolog.InfoLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	for _, p := range proxies {
		if err := server.Collection.Add(toxiproxy.NewProxy(server, p.name, p.listen, p.upstream), true); err != nil {
			return fmt.Errorf("proxy %s %s → %s: %w", p.name, p.listen, p.upstream, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- server.Listen(api) }()
	select {
	case err := <-errc:
		_ = server.Collection.Clear()
		if err == nil || errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("API on %s: %w", api, err)
	case <-ctx.Done():
		_ = server.Shutdown()
		return server.Collection.Clear() // stops the proxy: its connections are closed
	}
}
