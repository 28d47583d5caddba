package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account == "" {
		return errors.New("--account: required")
	}
	daysGiven := false
	fs.Visit(func(f *flag.Flag) { daysGiven = daysGiven || f.Name == "days" })
	if daysGiven && *days == 0 {
		return fmt.Errorf("--days: must be 1 to %d", authtoken.MaxTokenDays)
	}
	// The server's token service: granting role service publishes the account's new role and
	// invalidates its cached tokens.
	tok, err := e.core.Tokens.CreateServiceToken(ctx, authtoken.CommandLineCaller(), *account, authtoken.TokenSpec{
		Name: *name, Scopes: splitList(*scopes), ExpiresInDays: *days,
	})
	var input *problem.FieldError
	switch {
	case errors.As(err, &input):
		return fmt.Errorf("--%s: %s", flagOf(input.Location), input.Message)
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

// flagOf names the command-line flag of a request field (scopes[1] -> scopes).
func flagOf(location string) string {
	f, _, _ := strings.Cut(strings.TrimPrefix(location, "body."), "[")
	if f == "expires_in_days" {
		return "days"
	}
	return f
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
