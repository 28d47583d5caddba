package cmd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
)

func (a *App) loginCommand() *cobra.Command {
	var token string
	var tokenStdin, noBrowser bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in: through the browser (identity provider) or with an API token",
		Long: "Without --token: opens the identity provider's login in your browser. obsops listens on a loopback address\n" +
			"(127.0.0.1, a free port); at the end of the login the browser brings it a one-time code, which obsops\n" +
			"exchanges (PKCE-bound) at POST /idp/token for a session JWT. The JWT never appears in a URL.\n\n" +
			"With --token: stores an API token (ops_api_token_...) instead; commands on routes that take only session\n" +
			"JWTs (tokens, transfer reads, admin actions) then exit 1 saying so.\n\n" +
			"The credential is stored in the context (--context, default the current one) of the configuration file,\n" +
			"mode 0600, with the URL (--url, or the context's).",
		Example: "  obsops login --url https://obsops.example.org\n  obsops login --token ops_api_token_...\n  obsops login --context observatory --url http://obs-gw:8080",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, _, err := a.target()
			if err != nil {
				return err
			}
			if tokenStdin {
				var b strings.Builder
				buf := make([]byte, 4096)
				for {
					n, err := a.Stdin.Read(buf)
					b.Write(buf[:n])
					if err != nil {
						break
					}
				}
				token = strings.TrimSpace(b.String())
			}
			if token != "" {
				return a.loginToken(ctxOf(cmd), base, token)
			}
			return a.loginBrowser(ctxOf(cmd), base, !noBrowser, wait)
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "store this API token instead of logging in through the browser")
	cmd.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the API token from standard input")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the login URL only; do not open a browser")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long to wait for the browser login")
	return cmd
}

// loginToken checks token with /auth/me and stores it.
func (a *App) loginToken(ctx context.Context, base, token string) error {
	c, err := client.New(client.Options{BaseURL: base, Token: token, HTTPClient: &http.Client{Timeout: a.timeout}})
	if err != nil {
		return err
	}
	resp, err := c.API.GetMeWithResponse(ctx)
	if err := checkResp("", resp, err); err != nil {
		return fmt.Errorf("the token was not accepted: %w", err)
	}
	kind := "api_token"
	if !isAPIToken(token) {
		kind = "jwt"
	}
	ctxName, err := a.store(base, &Context{Token: token, TokenKind: kind, Username: resp.JSON200.User.Username, ExpiresAt: timeText(resp.JSON200.ExpiresAt)})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "Logged in to %s as %s (%s), context %q.\n", base, resp.JSON200.User.Username, kind, ctxName)
	return nil
}

func timeText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// store saves the credential in the context in use (created if needed) and makes it current.
func (a *App) store(base string, c *Context) (string, error) {
	name, _, err := a.current()
	if err != nil {
		return "", err
	}
	cfg, _ := a.config()
	c.URL = base
	cfg.Contexts[name] = c
	cfg.CurrentContext = name
	path, err := a.configPath()
	if err != nil {
		return "", err
	}
	return name, cfg.save(path)
}

// loginBrowser runs the loopback flow: listen on 127.0.0.1, send the browser to /idp/login with
// our redirect_uri and PKCE challenge, take the one-time code the browser brings back, exchange
// it at /idp/token.
func (a *App) loginBrowser(ctx context.Context, base string, openBrowser bool, wait time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on a loopback address: %w", err)
	}
	defer ln.Close()
	redirect := "http://" + ln.Addr().String() + "/callback"
	verifier, state := randomURLSafe(32), randomURLSafe(16)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"redirect_uri":          {redirect},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
		"state":                 {state},
	}
	loginURL := base + "/idp/login?" + q.Encode()

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		p := r.URL.Query()
		var res result
		switch {
		case p.Get("state") != state:
			res.err = errors.New("the browser came back with another login's state; run obsops login again")
		case p.Get("code") == "":
			res.err = errors.New("the browser came back without a code")
		default:
			res.code = p.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if res.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<!doctype html><title>obsops</title><p>Login failed: %s</p>", res.err)
		} else {
			fmt.Fprint(w, "<!doctype html><title>obsops</title><p>Logged in to obsops. You can close this window and return to the terminal.</p>")
		}
		select {
		case done <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(a.Stderr, "Open this URL in your browser to log in:\n\n  %s\n\nWaiting for the browser (%s)...\n", loginURL, wait)
	if openBrowser {
		_ = openURL(loginURL)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(wait):
		return fmt.Errorf("no login within %s", wait)
	case <-ctx.Done():
		return ctx.Err()
	}
	if res.err != nil {
		return res.err
	}
	c, err := client.New(client.Options{BaseURL: base, HTTPClient: &http.Client{Timeout: a.timeout}})
	if err != nil {
		return err
	}
	resp, err := c.API.IdpTokenWithResponse(ctx, api.TokenRequest{
		GrantType: api.AuthorizationCode, Code: res.code, CodeVerifier: verifier, RedirectUri: redirect,
	})
	if err := checkResp("", resp, err); err != nil {
		return err
	}
	lr := resp.JSON200
	name, err := a.store(base, &Context{Token: lr.AccessToken, TokenKind: "jwt", Username: lr.User.Username, ExpiresAt: lr.ExpiresAt.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "Logged in to %s as %s (roles %s) until %s, context %q.\n", base, lr.User.Username,
		strings.Join(client.Deref(lr.User.Roles), ","), lr.ExpiresAt.UTC().Format(time.RFC3339), name)
	return nil
}

func randomURLSafe(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// openURL opens u in the user's browser, if there is one.
func openURL(u string) error {
	switch runtime.GOOS {
	case "darwin":
		return exec.Command("open", u).Start()
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", u).Start()
	default:
		return exec.Command("xdg-open", u).Start()
	}
}

func (a *App) logoutCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the credential of the context in use",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			name, c, err := a.current()
			if err != nil || c == nil {
				return err
			}
			c.Token, c.TokenKind, c.ExpiresAt, c.Username = "", "", "", ""
			path, err := a.configPath()
			if err != nil {
				return err
			}
			if err := a.cfg.save(path); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "Logged out of context %q.\n", name)
			return nil
		},
	}
}

func (a *App) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Who the credential in use is (GET /auth/me)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.GetMeWithResponse(ctxOf(cmd))
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, view{columns: []string{"user.username", "user.id", "user.roles", "authenticated_by", "expires_at", "token.id", "token.scopes"}})
		},
	}
}

func (a *App) configCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Contexts of the configuration file"}
	cmd.AddCommand(&cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			var b strings.Builder
			b.WriteString("[")
			for i, n := range cfg.names() {
				c := cfg.Contexts[n]
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"name":%q,"current":%t,"url":%q,"username":%q,"token_kind":%q,"expires_at":%q}`,
					n, n == cfg.CurrentContext, c.URL, c.Username, c.TokenKind, c.ExpiresAt)
			}
			b.WriteString("]")
			return a.show([]byte(b.String()), view{columns: []string{"name", "current", "url", "username", "token_kind", "expires_at"}})
		},
	}, &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the current context",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			if cfg.Contexts[args[0]] == nil {
				return fmt.Errorf("no context %q (have: %s)", args[0], strings.Join(cfg.names(), ", "))
			}
			cfg.CurrentContext = args[0]
			path, err := a.configPath()
			if err != nil {
				return err
			}
			return cfg.save(path)
		},
	})
	return cmd
}
