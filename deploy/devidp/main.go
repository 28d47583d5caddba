// Command devidp is a real OpenID Connect provider for local development, and nothing else:
// ZITADEL's example OP (github.com/zitadel/oidc/v3/example/server, Apache-2.0) with its login
// form, a few documented dev users and one confidential client for obsops, bound to loopback.
// `make up` starts it on 127.0.0.1:9998 so that http://127.0.0.1:8080/idp/login works in a
// browser on a fresh machine. Its users and passwords are public: never expose it.
//
// Usage:
//
//	devidp [-addr 127.0.0.1:9998] [-issuer URL] [-client-id obsops-dev] [-client-secret S]
//	       [-redirect-uris URL,URL] [-users FILE]
//
// Every flag can also be given as an environment variable (OPS_DEVIDP_ADDR, OPS_DEVIDP_ISSUER,
// OPS_DEVIDP_CLIENT_ID, OPS_DEVIDP_CLIENT_SECRET, OPS_DEVIDP_REDIRECT_URIS, OPS_DEVIDP_USERS_FILE).
// Without those, the client settings come from the variables authtoken reads (OPS_OIDC_CLIENT_ID,
// OPS_OIDC_CLIENT_SECRET, OPS_OIDC_REDIRECT_URL), so one environment file keeps both in step.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "devidp:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	cfg, err := parseConfig(args, os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "devidp")
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if cfg.Issuer == "" {
		cfg.Issuer = "http://" + ln.Addr().String()
	}
	handler, err := newProvider(cfg, log)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("development identity provider listening (dev users and passwords are public: loopback only)",
		"issuer", cfg.Issuer, "client_id", cfg.ClientID, "redirect_uris", cfg.RedirectURIs, "users", cfg.describeUsers())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// Config is how devidp runs.
type Config struct {
	Addr         string   // listen address; must be a loopback address
	Issuer       string   // issuer URL; default http://<Addr>
	ClientID     string   // the confidential client obsops uses
	ClientSecret string   // its secret (a dev value, documented)
	RedirectURIs []string // allowed redirect URIs of the client
	UsersFile    string   // JSON users in the example's format instead of the dev users
}

func parseConfig(args []string, getenv func(string) string) (*Config, error) {
	// def is the first non-empty of the variables, else fallback.
	def := func(fallback string, names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return fallback
	}
	cfg := &Config{}
	var redirects string
	fs := flag.NewFlagSet("devidp", flag.ContinueOnError)
	fs.StringVar(&cfg.Addr, "addr", def("127.0.0.1:9998", "OPS_DEVIDP_ADDR"), "listen address (loopback only)")
	fs.StringVar(&cfg.Issuer, "issuer", def("", "OPS_DEVIDP_ISSUER"), "issuer URL (default http://ADDR)")
	fs.StringVar(&cfg.ClientID, "client-id", def("obsops-dev", "OPS_DEVIDP_CLIENT_ID", "OPS_OIDC_CLIENT_ID"), "client id of obsops")
	fs.StringVar(&cfg.ClientSecret, "client-secret", def("obsops-dev-secret", "OPS_DEVIDP_CLIENT_SECRET", "OPS_OIDC_CLIENT_SECRET"), "client secret of obsops (development value)")
	fs.StringVar(&redirects, "redirect-uris", def("http://127.0.0.1:8080/idp/callback",
		"OPS_DEVIDP_REDIRECT_URIS", "OPS_OIDC_REDIRECT_URL"), "comma-separated redirect URIs of the client")
	fs.StringVar(&cfg.UsersFile, "users", def("", "OPS_DEVIDP_USERS_FILE"), "JSON file of users instead of the built-in dev users")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, r := range strings.Split(redirects, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.RedirectURIs = append(cfg.RedirectURIs, r)
		}
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("-addr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("-addr %s: devidp serves public dev passwords and binds to loopback only", cfg.Addr)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" || len(cfg.RedirectURIs) == 0 {
		return nil, errors.New("client id, client secret and at least one redirect URI are required")
	}
	return cfg, nil
}
