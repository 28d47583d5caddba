// Package cmd is the obsops command: one cobra command per API use, over the typed client
// (github.com/obsops/obsops/client). Exit codes scripts can rely on: 0 ok, 1 refused or invalid
// (the API's problem, or a local check), 2 usage (unknown command, bad flag or argument), 3 the
// gateway unreachable.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client"
)

// Exit codes of the obsops command.
const (
	ExitOK          = 0
	ExitRefused     = 1
	ExitUsage       = 2
	ExitUnreachable = 3
)

// Version is the command's version, shown by `obsops --version` (main sets it).
var Version = "dev"

// usageError is a command used wrongly (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// App is one run of the command: its streams, global flags and configuration.
type App struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader

	output      string
	contextName string
	url         string
	configFile  string
	timeout     time.Duration

	cfg *Config
}

// MainContext runs the command with args and returns its exit code; ctx ends it (Ctrl-C).
func MainContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &App{Stdout: stdout, Stderr: stderr, Stdin: stdin}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "Error:", err)
	return exitCode(err)
}

// exitCode maps an error to the exit code it means.
func exitCode(err error) int {
	var ue *usageError
	var un *client.Unreachable
	switch {
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &un):
		return ExitUnreachable
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "required flag"} {
		if strings.HasPrefix(msg, p) {
			return ExitUsage
		}
	}
	return ExitRefused
}

func (a *App) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "obsops",
		Short: "The obsops command line: programs, sources, ingest, transfers and tokens through the obsops API",
		Long: "obsops talks to an obsops gateway with your own credentials (obsops login, or an API token).\n\n" +
			"Configuration: $XDG_CONFIG_HOME/obsops/config.yaml (named contexts); OBSOPS_URL and OBSOPS_TOKEN override it.\n" +
			"Exit codes: 0 ok, 1 refused or invalid, 2 usage, 3 the gateway unreachable.",
		Version:       Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case outTable, outJSON, outCSV:
			default:
				return usagef("--output must be table, json or csv, not %q", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.output, "output", "o", outTable, "output of reads: table, json or csv")
	pf.StringVar(&a.contextName, "context", "", "the configuration context to use (default: the current one)")
	pf.StringVar(&a.url, "url", "", "the gateway URL (overrides the context and OBSOPS_URL)")
	pf.StringVar(&a.configFile, "config", "", "configuration file (default $XDG_CONFIG_HOME/obsops/config.yaml)")
	pf.DurationVar(&a.timeout, "timeout", 60*time.Second, "timeout of one request")
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{outTable, outJSON, outCSV}, cobra.ShellCompDirectiveNoFileComp
	})
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		if cfg, err := a.config(); err == nil {
			return cfg.names(), cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	})
	subs := []*cobra.Command{a.loginCommand(), a.logoutCommand(), a.whoamiCommand(), a.configCommand(),
		a.tokenCommand(), a.programCommand(), a.sourceCommand(), a.visibilityCommand(), a.heatmapCommand(),
		a.ingestCommand(), a.transferCommand(), a.siteCommand()}
	for _, c := range subs {
		groups(c)
	}
	root.AddCommand(subs...)
	return root
}

// groups makes every command that only groups others refuse an unknown subcommand with a usage
// error (exit 2) instead of showing its help with success.
func groups(c *cobra.Command) {
	if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
	for _, s := range c.Commands() {
		groups(s)
	}
}

// config loads the configuration once.
func (a *App) config() (*Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	path, err := a.configPath()
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	a.cfg = cfg
	return cfg, nil
}

func (a *App) configPath() (string, error) {
	if a.configFile != "" {
		return a.configFile, nil
	}
	return configPath()
}

// current returns the name of the context in use and the context (nil if it does not exist).
func (a *App) current() (string, *Context, error) {
	cfg, err := a.config()
	if err != nil {
		return "", nil, err
	}
	name := a.contextName
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		name = "default"
	}
	return name, cfg.Contexts[name], nil
}

// target is the gateway URL and credential in use: flags, then OBSOPS_URL/OBSOPS_TOKEN, then
// the context.
func (a *App) target() (baseURL, token string, err error) {
	_, ctx, err := a.current()
	if err != nil {
		return "", "", err
	}
	if ctx != nil {
		baseURL, token = ctx.URL, ctx.Token
	}
	if v := os.Getenv("OBSOPS_URL"); v != "" {
		baseURL = v
	}
	if v := os.Getenv("OBSOPS_TOKEN"); v != "" {
		token = v
	}
	if a.url != "" {
		baseURL = a.url
	}
	if baseURL == "" {
		return "", "", usagef("no gateway URL: run `obsops login --url URL`, or set OBSOPS_URL")
	}
	return strings.TrimRight(baseURL, "/"), token, nil
}

// client returns a client for the target; needCredential refuses (exit 1) without a credential.
func (a *App) client(needCredential bool) (*client.Client, string, error) {
	base, token, err := a.target()
	if err != nil {
		return nil, "", err
	}
	if needCredential && token == "" {
		return nil, "", errors.New("not logged in: run `obsops login` (or `obsops login --token`, or set OBSOPS_TOKEN)")
	}
	c, err := client.New(client.Options{BaseURL: base, Token: token, HTTPClient: &http.Client{Timeout: a.timeout}, UserAgent: "obsops-cli"})
	return c, token, err
}

// clientForID is client for a command whose argument is an object's id: the id parsed (exit 2
// when it is not one) before any configuration is read.
func (a *App) clientForID(arg string, needCredential bool) (int64, *client.Client, string, error) {
	id, err := parseID(arg, "ID")
	if err != nil {
		return 0, nil, "", err
	}
	c, tok, err := a.client(needCredential)
	return id, c, tok, err
}

// check turns a generated call's outcome into the command's error, adding a hint when an API
// token was refused on a route that takes only session JWTs.
func check(token string, resp *http.Response, body []byte, err error) error {
	err = client.Check(resp, body, err)
	var p *client.Problem
	if errors.As(err, &p) && p.Status == http.StatusForbidden && isAPIToken(token) {
		return fmt.Errorf("%w\nthis command needs a session JWT (API tokens are not accepted here): run `obsops login`", err)
	}
	return err
}

// checkResp is check for a generated response (nil when the request failed).
func checkResp(token string, resp any, err error) error {
	hr, body := outcome(resp)
	return check(token, hr, body, err)
}

// outcome is the HTTP answer and body of a generated response (each has HTTPResponse and Body).
func outcome(resp any) (*http.Response, []byte) {
	v := reflect.ValueOf(resp)
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, nil
	}
	e := v.Elem()
	hr, _ := e.FieldByName("HTTPResponse").Interface().(*http.Response)
	b, _ := e.FieldByName("Body").Interface().([]byte)
	return hr, b
}

func isAPIToken(t string) bool { return strings.HasPrefix(t, "ops_api_token_") }

// show writes a read's answer in the chosen output format.
func (a *App) show(body []byte, v view) error { return render(a.Stdout, a.output, body, v) }

// ctx is the context of one command.
func ctxOf(cmd *cobra.Command) context.Context {
	if c := cmd.Context(); c != nil {
		return c
	}
	return context.Background()
}

// exactArgs is cobra.ExactArgs as a usage error (exit 2).
func exactArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %d argument(s), got %d", n, len(args))
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs as a usage error (exit 2).
func minArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("expected at least %d argument(s), got %d", n, len(args))
		}
		return nil
	}
}
