// Package admin is `authtoken admin`: commands that bootstrap a fresh install without a browser
// (create users, grant roles, issue a JWT, create service tokens). They read the same OPS_*
// configuration as the server and write through the same stores.
package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/app"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// Usage lists the subcommands.
const Usage = `usage: authtoken admin COMMAND [flags]

commands:
  create-user           --user NAME [--roles r1,r2] [--service]   create a user (idempotent)
  grant-role            --user NAME --roles r1,r2                 grant roles to an existing user
  issue-jwt             --user NAME --roles admin[,observer,...]  print a session JWT (creates the user if needed)
  create-service-token  --account NAME --scopes s1,s2 [--name N] [--days D]
                        [--kind instrument|mover|weather [--instruments 1,2] [--modules 11,12] [--locations 1,2]]
                                                                  create a service account (role service) with its kind and bindings
                                                                  and print a new API token (an existing account: the same kind and bindings)
  set-service-bindings  --account NAME --kind K [--instruments ..] [--modules ..] [--locations ..]
                                                                  replace a service account's kind and bindings (audited)
  generate-signing-key  --out PATH                                write a new Ed25519 JWT signing key (PEM)
  export-public-keys    --out PATH                                write the public halves of OPS_JWT_SIGNING_KEY and OPS_JWT_PREVIOUS_KEYS
                                                                  (PEM): a secondary site's OPS_JWT_MAIN_PUBLIC_KEYS (run at the main)
  link-identity         --user NAME --issuer URL --subject SUB [--move]
                                                                  link a user to an identity-provider account (its logins reach this user; audited);
                                                                  --move takes the identity from the account that has it
  disable-user          --user NAME                               disable a user: none of their credentials verifies anywhere within 5 s
  enable-user           --user NAME                               enable a disabled user again (session JWTs issued before stay refused)
  purge-token-cache                                               drop every cached token record (after changing users or tokens in SQL by hand)

roles: admin, observer, viewer, service`

// Env is what the commands work with.
type Env struct {
	Config *authtoken.Config
	Stdout io.Writer
	Stderr io.Writer
	// core is the server's token and user services (app.NewCore) on the admin's connections: a
	// change made here invalidates the server's token cache and publishes the user directory
	// exactly as the server's own changes do.
	core *app.Core
}

// Run executes one admin command.
func Run(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return errors.New(Usage)
	}
	cmd, rest := args[0], args[1:]
	if cmd == "generate-signing-key" {
		return generateKey(rest)
	}
	if cmd == "export-public-keys" {
		return env.exportPublicKeys(rest)
	}
	if env.Config.DatabaseURL == "" {
		return errors.New("OPS_DATABASE_URL: required but not set")
	}
	db, err := database.Open(env.Config.MainDB(), 2) // the admin commands change rows: at a secondary site, on the main site
	if err != nil {
		return err
	}
	defer db.Close()
	ropts, err := redis.ParseURL(env.Config.RedisURL)
	if err != nil {
		return fmt.Errorf("OPS_REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	env.core = app.NewCore(env.Config, app.Parts{Read: db, Redis: rdb, Log: slog.New(slog.NewTextHandler(env.Stderr, nil))})
	switch cmd {
	case "create-user":
		return env.createUser(ctx, rest)
	case "grant-role":
		return env.grantRole(ctx, rest)
	case "issue-jwt":
		return env.issueJWT(ctx, rest)
	case "create-service-token":
		return env.createServiceToken(ctx, rest)
	case "set-service-bindings":
		return env.setServiceBindings(ctx, rest)
	case "link-identity":
		return env.linkIdentity(ctx, rest)
	case "disable-user":
		return env.setActive(ctx, rest, false)
	case "enable-user":
		return env.setActive(ctx, rest, true)
	case "purge-token-cache":
		if len(rest) > 0 {
			return fmt.Errorf("purge-token-cache takes no arguments\n%s", Usage)
		}
		if err := env.core.Cache.Purge(ctx); err != nil {
			return fmt.Errorf("purge the token cache: %w", err)
		}
		_, err := fmt.Fprintln(env.Stdout, "token cache purged: tokens verify against PostgreSQL again")
		return err
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, Usage)
	}
}

func (e *Env) users() *authtoken.UserService { return e.core.Users }

// grantRoles gives a user roles, then (through the user service) invalidates the server's
// cached records of the user's API tokens and publishes the user directory, so the new roles
// count everywhere at once. Redis being unreachable does not fail the command: the grant
// stands and is logged; the server publishes it within seconds once Redis is back.
func (e *Env) grantRoles(ctx context.Context, userID int64, roles []string) error {
	return e.users().GrantRoles(ctx, userID, roles, "admin-cli")
}

// setActive disables or enables --user, audited with actor admin-cli.
func (e *Env) setActive(ctx context.Context, args []string, active bool) error {
	name := "disable-user"
	if active {
		name = "enable-user"
	}
	fs := newFlags(name)
	user := fs.String("user", "", "username")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("--user: required")
	}
	u, err := e.users().SetActiveByName(ctx, authtoken.CommandLineCaller(), *user, active)
	switch {
	case errors.Is(err, problem.ErrNotFound):
		return fmt.Errorf("--user: no user %q", *user)
	case errors.Is(err, authtoken.ErrLastAdmin):
		return fmt.Errorf("--user: %q is the last active admin: make another user admin first", *user)
	case err != nil:
		return err
	}
	state := "disabled: none of their credentials verifies anywhere within 5 s"
	if active {
		state = "enabled"
	}
	fmt.Fprintf(e.Stdout, "user %s (id %d) %s\n", u.Username, u.ID, state)
	return nil
}

// linkIdentity links --user to the identity-provider account (--issuer, --subject), audited with
// actor admin-cli: the one way an existing account is tied to a login.
func (e *Env) linkIdentity(ctx context.Context, args []string) error {
	fs := newFlags("link-identity")
	user := fs.String("user", "", "username")
	issuer := fs.String("issuer", "", "the identity provider's issuer URL (iss)")
	subject := fs.String("subject", "", "the account's subject at the provider (sub)")
	move := fs.Bool("move", false, "take the identity from the account that has it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("--user: required")
	}
	u, err := e.users().ByUsername(ctx, *user)
	if errors.Is(err, problem.ErrNotFound) {
		return fmt.Errorf("--user: no user %q", *user)
	}
	if err != nil {
		return err
	}
	u, err = e.users().LinkIdentity(ctx, authtoken.CommandLineCaller(), u.ID, *issuer, *subject, *move)
	var input *problem.FieldError
	switch {
	case errors.As(err, &input):
		return fmt.Errorf("--%s: %s", flagOf(input.Location), input.Message)
	case errors.Is(err, authtoken.ErrServiceAccountLogin):
		return fmt.Errorf("--user: %q is a service account: service accounts never log in", *user)
	case errors.Is(err, authtoken.ErrIdentityConflict):
		return fmt.Errorf("--subject: %v", err)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.Stdout, "user %s (id %d) linked to %s at %s: its logins reach this user\n", u.Username, u.ID, *subject, *issuer)
	return nil
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("authtoken admin "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// userAndRoles checks --user and parses --roles, for the commands that take both.
func userAndRoles(user, roles string) ([]string, error) {
	if !authtoken.ValidUsername(user) {
		return nil, errors.New("--user: a username of 1-255 characters without spaces is required")
	}
	return parseRoles(roles)
}

// parseRoles splits a comma list and checks every role.
func parseRoles(s string) ([]string, error) {
	var roles []string
	for _, r := range splitList(s) {
		if !authn.ValidRole(r) {
			return nil, fmt.Errorf("--roles: unknown role %q (admin, observer, viewer, service)", r)
		}
		if !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	return roles, nil
}

func (e *Env) createUser(ctx context.Context, args []string) error {
	fs := newFlags("create-user")
	user := fs.String("user", "", "username")
	rolesFlag := fs.String("roles", "", "comma-separated roles")
	svc := fs.Bool("service", false, "service account")
	if err := fs.Parse(args); err != nil {
		return err
	}
	roles, err := userAndRoles(*user, *rolesFlag)
	if err != nil {
		return err
	}
	u, created, err := e.users().Ensure(ctx, *user, *svc)
	if err != nil {
		return err
	}
	if len(roles) > 0 {
		if err := e.grantRoles(ctx, u.ID, roles); err != nil {
			return err
		}
	}
	state := "exists"
	if created {
		state = "created"
	}
	fmt.Fprintf(e.Stdout, "user %s (id %d) %s\n", u.Username, u.ID, state)
	return nil
}

func (e *Env) grantRole(ctx context.Context, args []string) error {
	fs := newFlags("grant-role")
	user := fs.String("user", "", "username")
	rolesFlag := fs.String("roles", "", "comma-separated roles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	roles, err := parseRoles(*rolesFlag)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return errors.New("--roles: at least one role is required")
	}
	u, err := e.users().ByUsername(ctx, *user)
	if errors.Is(err, problem.ErrNotFound) {
		return fmt.Errorf("--user: no user %q (create it with create-user)", *user)
	}
	if err != nil {
		return err
	}
	if err := e.grantRoles(ctx, u.ID, roles); err != nil {
		return err
	}
	held := append(slices.Clone(u.Roles), roles...)
	slices.Sort(held)
	fmt.Fprintf(e.Stdout, "user %s now has roles %s\n", u.Username, strings.Join(slices.Compact(held), ","))
	return nil
}

func (e *Env) issueJWT(ctx context.Context, args []string) error {
	fs := newFlags("issue-jwt")
	user := fs.String("user", "", "username")
	rolesFlag := fs.String("roles", "", "comma-separated roles, granted to the user and put in the JWT (default: the user's roles)")
	ttl := fs.Duration("ttl", e.Config.JWTTTL, "lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	roles, err := userAndRoles(*user, *rolesFlag)
	if err != nil {
		return err
	}
	ring, err := signing.NewKeyRing(e.Config.JWTSigningKey, e.Config.JWTPreviousKeys)
	if err != nil {
		return err
	}
	u, _, err := e.users().Ensure(ctx, *user, false)
	if err != nil {
		return err
	}
	if len(roles) > 0 {
		if err := e.grantRoles(ctx, u.ID, roles); err != nil {
			return err
		}
	}
	if len(roles) == 0 {
		roles = u.Roles // as Ensure read them, with the user
	}
	iss := &signing.Issuer{Ring: ring, Issuer: e.Config.JWTIssuer, Audience: e.Config.JWTAudience, TTL: *ttl, Site: e.Config.SiteName}
	tok, _, err := iss.Issue(u.ID, u.Username, roles)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.Stdout, tok)
	return nil
}

// exportPublicKeys writes the public halves of this site's signing keys (active and previous) to
// --out: what a secondary site is given as OPS_JWT_MAIN_PUBLIC_KEYS, so it verifies the main's
// JWTs without ever holding the main's private key. Rerun after a rotation at the main.
func (e *Env) exportPublicKeys(args []string) error {
	fs := newFlags("export-public-keys")
	out := fs.String("out", "", "path of the PEM file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out: required")
	}
	if e.Config.Secondary() {
		return errors.New("export-public-keys runs at the main site: a secondary's keys are never trusted by the main")
	}
	ring, err := signing.NewKeyRing(e.Config.JWTSigningKey, e.Config.JWTPreviousKeys)
	if err != nil {
		return err
	}
	data, err := ring.PublicPEM()
	if err != nil {
		return err
	}
	return os.WriteFile(*out, data, 0o644)
}

func generateKey(args []string) error {
	fs := newFlags("generate-signing-key")
	out := fs.String("out", "", "path of the new PEM file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out: required")
	}
	return signing.GenerateKeyFile(*out)
}
