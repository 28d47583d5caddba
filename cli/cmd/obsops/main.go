// Command obsops is the obsops command line: see `obsops --help` and docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/obsops/obsops/cli/internal/cmd"
)

// Set by `make build` (-ldflags -X).
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	cmd.Version = version + " (" + commit + ")"
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cmd.MainContext(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
