// Command gateway is the single public entry point of obsops.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/gateway"
	"github.com/obsops/obsops/services/gateway/httpapi"
)

var version, commit = "dev", "unknown" // set with -ldflags -X

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg gateway.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	svc, err := service.New(service.Options{
		Name: "gateway", Title: "obsops", Addr: cfg.Addr, Common: cfg.Common,
		Build: service.Build{Version: version, Commit: commit},
	})
	if err != nil {
		return err
	}
	upstreams := map[string]*gateway.Upstream{}
	for name, base := range cfg.Upstreams.ByService() {
		if upstreams[name], err = gateway.NewUpstream(name, base, cfg.UpstreamTimeout, cfg.DialTimeout); err != nil {
			return &config.Invalid{Var: "OPS_" + name + "_URL", Reason: err.Error()}
		}
	}
	httpapi.Register(svc.App, upstreams)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return svc.Run(ctx)
}
