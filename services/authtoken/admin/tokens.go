package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// createServiceToken creates the service account (role service) if needed and prints a new API
// token for it: the raw token alone on stdout, so a script can capture it. It goes through the
// same TokenService as POST /api/tokens/service and writes the same audit row (actor admin-cli).
func (e *Env) createServiceToken(ctx context.Context, args []string) error {
	fs := newFlags("create-service-token")
	account := fs.String("account", "", "service account username")
	scopes := fs.String("scopes", "", "comma-separated scopes, e.g. write:observations,write:data")
	name := fs.String("name", "", "token label (default \""+authtoken.DefaultServiceTokenName+"\")")
	days := fs.Int("days", 0, fmt.Sprintf("lifetime in days, 1-%d (default OPS_TOKEN_DEFAULT_DAYS)", authtoken.MaxTokenDays))
	kb := bindingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account == "" {
		return errors.New("--account: required")
	}
	acct, err := kb()
	if err != nil {
		return err
	}
	daysGiven := false
	fs.Visit(func(f *flag.Flag) { daysGiven = daysGiven || f.Name == "days" })
	if daysGiven && *days == 0 {
		return fmt.Errorf("--days: must be 1 to %d", authtoken.MaxTokenDays)
	}
	// The server's token service: granting role service publishes the account's new role and
	// invalidates its cached tokens.
	tok, err := e.core.Tokens.CreateServiceToken(ctx, authtoken.CommandLineCaller(), *account, authtoken.TokenSpec{
		Name: *name, Scopes: splitList(*scopes), ExpiresInDays: *days, Account: acct,
	})
	var input *problem.FieldError
	switch {
	case errors.As(err, &input):
		return fmt.Errorf("--%s: %s", flagOf(input.Location), input.Message)
	case errors.Is(err, authtoken.ErrBindingsDiffer):
		return fmt.Errorf("--kind: %w; change them with set-service-bindings", err)
	case errors.Is(err, authtoken.ErrNotServiceAccount):
		return fmt.Errorf("--account: %q is a person's account, not a service account", *account)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.Stderr, "service token %d (%s) for %s, scopes %s, expires %s\n", tok.ID, tok.Prefix,
		tok.Account.Username, strings.Join(tok.Scopes, ","), tok.ExpiresAt.Format(time.RFC3339))
	fmt.Fprintln(e.Stdout, tok.Secret)
	return nil
}

// bindingFlags adds --kind, --instruments, --modules and --locations to fs; the function it
// returns gives their kind and bindings once parsed (nil without --kind).
func bindingFlags(fs *flag.FlagSet) func() (*authtoken.KindBindings, error) {
	kind := fs.String("kind", "", "service account kind: instrument, mover or weather")
	instruments := fs.String("instruments", "", "instrument: comma-separated instrument ids bound whole")
	modules := fs.String("modules", "", "instrument: comma-separated instrument module ids")
	locations := fs.String("locations", "", "mover: comma-separated data location ids")
	return func() (*authtoken.KindBindings, error) {
		if *kind == "" {
			if *instruments+*modules+*locations != "" {
				return nil, errors.New("--kind: bindings need a kind")
			}
			return nil, nil
		}
		kb := &authtoken.KindBindings{Kind: *kind}
		var err error
		for _, l := range []struct {
			flag, val string
			ids       *[]int64
		}{{"instruments", *instruments, &kb.Bindings.Instruments}, {"modules", *modules, &kb.Bindings.Modules}, {"locations", *locations, &kb.Bindings.Locations}} {
			for _, v := range splitList(l.val) {
				id, perr := strconv.ParseInt(v, 10, 64)
				if perr != nil {
					err = fmt.Errorf("--%s: %q is not an id", l.flag, v)
				}
				*l.ids = append(*l.ids, id)
			}
		}
		return kb, err
	}
}

// setServiceBindings replaces a service account's kind and bindings through the same
// TokenService as PUT /api/tokens/service/{username}/bindings (audited, actor admin-cli).
func (e *Env) setServiceBindings(ctx context.Context, args []string) error {
	fs := newFlags("set-service-bindings")
	account := fs.String("account", "", "service account username")
	kb := bindingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account == "" {
		return errors.New("--account: required")
	}
	acct, err := kb()
	if err != nil {
		return err
	}
	if acct == nil {
		return errors.New("--kind: required")
	}
	got, err := e.core.Tokens.SetBindings(ctx, authtoken.CommandLineCaller(), *account, *acct)
	var input *problem.FieldError
	switch {
	case errors.As(err, &input):
		return fmt.Errorf("--%s: %s", flagOf(input.Location), input.Message)
	case errors.Is(err, problem.ErrNotFound):
		return fmt.Errorf("--account: no account called %q", *account)
	case errors.Is(err, authtoken.ErrNotServiceAccount):
		return fmt.Errorf("--account: %q is a person's account, not a service account", *account)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.Stderr, "service account %s: kind %s, instruments %v, modules %v, locations %v\n", got.Username, got.Kind,
		got.Bindings.Instruments, got.Bindings.Modules, got.Bindings.Locations)
	return nil
}

// flagOf names the command-line flag of a request field (scopes[1] -> scopes).
func flagOf(location string) string {
	f, _, _ := strings.Cut(strings.TrimPrefix(location, "body."), "[")
	switch f {
	case "expires_in_days":
		return "days"
	case "bindings.instrument_modules":
		return "modules"
	case "bindings":
		return "kind"
	}
	return strings.TrimPrefix(f, "bindings.")
}

// splitList splits a comma list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
