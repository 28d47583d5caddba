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
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/postgres"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// Usage lists the subcommands.
const Usage = `usage: authtoken admin COMMAND [flags]

commands:
  create-user           --user NAME [--roles r1,r2] [--service]   create a user (idempotent)
  grant-role            --user NAME --roles r1,r2                 grant roles to an existing user
  issue-jwt             --user NAME --roles admin[,observer,...]  print a session JWT (creates the user if needed)
  create-service-token  --account NAME --scopes s1,s2 [--name N] [--days D]
                                                                  create a service account (role service) and print a new API token
  generate-signing-key  --out PATH                                write a new Ed25519 JWT signing key (PEM)

roles: admin, observer, viewer, service`

// Env is what the commands work with.
type Env struct {
	Config *authtoken.Config
	Stdout io.Writer
	Stderr io.Writer
	db     *sqlx.DB
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
	if env.Config.DatabaseURL == "" {
		return errors.New("OPS_DATABASE_URL: required but not set")
	}
	db, err := service.OpenDB(env.Config.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer db.Close()
	env.db = db
	switch cmd {
	case "create-user":
		return env.createUser(ctx, rest)
	case "grant-role":
		return env.grantRole(ctx, rest)
	case "issue-jwt":
		return env.issueJWT(ctx, rest)
	case "create-service-token":
		return env.createServiceToken(ctx, rest)
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, Usage)
	}
}

func (e *Env) users() *postgres.Users { return &postgres.Users{DB: e.db} }

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("authtoken admin "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseRoles splits a comma list and checks every role.
func parseRoles(s string) ([]string, error) {
	var roles []string
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
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
	roles, err := parseRoles(*rolesFlag)
	if err != nil {
		return err
	}
	if !authtoken.ValidUsername(*user) {
		return errors.New("--user: a username of 1-255 characters without spaces is required")
	}
	u, created, err := e.users().Ensure(ctx, *user, *svc)
	if err != nil {
		return err
	}
	if len(roles) > 0 {
		if err := e.users().GrantRoles(ctx, u.ID, roles, "admin-cli"); err != nil {
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
	if errors.Is(err, authtoken.ErrNotFound) {
		return fmt.Errorf("--user: no user %q (create it with create-user)", *user)
	}
	if err != nil {
		return err
	}
	if err := e.users().GrantRoles(ctx, u.ID, roles, "admin-cli"); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "user %s now has roles %s\n", u.Username, strings.Join(append(u.Roles, roles...), ","))
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
	roles, err := parseRoles(*rolesFlag)
	if err != nil {
		return err
	}
	if !authtoken.ValidUsername(*user) {
		return errors.New("--user: a username of 1-255 characters without spaces is required")
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
		if err := e.users().GrantRoles(ctx, u.ID, roles, "admin-cli"); err != nil {
			return err
		}
	}
	if len(roles) == 0 {
		if u, err = e.users().ByID(ctx, u.ID); err != nil {
			return err
		}
		roles = u.Roles
	}
	iss := &signing.Issuer{Ring: ring, Issuer: e.Config.JWTIssuer, Audience: e.Config.JWTAudience, TTL: *ttl}
	tok, _, err := iss.Issue(u.ID, u.Username, roles)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.Stdout, tok)
	return nil
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
