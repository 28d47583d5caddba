package cmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
)

var tokenView = view{rows: "items", columns: []string{"id", "name", "scopes", "is_active", "is_expired", "expires_at", "last_used_at"}}

func parseID(s, what string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s must be a positive integer id, not %q", what, s)
	}
	return id, nil
}

func (a *App) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Your API tokens (session JWT only: log in with obsops login)"}
	var pg paging
	list := &cobra.Command{
		Use: "list", Short: "List your API tokens", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			body, err := pg.list(ctxOf(cmd), tok, func(ctx context.Context, limit, offset int64) (any, error) {
				return c.API.ListTokensWithResponse(ctx, &api.ListTokensParams{Limit: &limit, Offset: &offset})
			})
			if err != nil {
				return err
			}
			return a.show(body, tokenView)
		},
	}
	pg.flags(list)

	var name string
	var scopes []string
	var days int64
	create := &cobra.Command{
		Use: "create --name NAME [--scope SCOPE]... [--expires-in-days N]", Short: "Create an API token (its secret is shown once)",
		Example: "  obsops token create --name pipeline --scope read:data --scope write:data --expires-in-days 90",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			body := api.TokenCreateBody{Name: name}
			if len(scopes) > 0 {
				s := make([]api.TokenCreateBodyScopes, len(scopes))
				for i, v := range scopes {
					s[i] = api.TokenCreateBodyScopes(v)
				}
				body.Scopes = &s
			}
			if days > 0 {
				body.ExpiresInDays = &days
			}
			resp, err := c.API.CreateTokenWithResponse(ctxOf(cmd), body)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			if a.output == outTable {
				fmt.Fprintln(a.Stderr, "The token (shown only now; store it safely):")
			}
			return a.show(resp.Body, view{columns: []string{"id", "name", "scopes", "expires_at", "token"}})
		},
	}
	create.Flags().StringVar(&name, "name", "", "the token's name (required)")
	create.Flags().StringArrayVar(&scopes, "scope", nil, "a scope, e.g. read:data (repeat; default: the server's)")
	create.Flags().Int64Var(&days, "expires-in-days", 0, "days until it expires (default: the server's)")
	_ = create.MarkFlagRequired("name")

	byID := func(use, short string, do func(ctx context.Context, c *client.Client, id int64) (any, error), v view) *cobra.Command {
		return &cobra.Command{
			Use: use + " ID", Short: short, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, c, tok, err := a.clientForID(args[0], true)
				if err != nil {
					return err
				}
				resp, err := do(ctxOf(cmd), c, id)
				if err := checkResp(tok, resp, err); err != nil {
					return err
				}
				_, body := outcome(resp)
				if len(body) == 0 {
					fmt.Fprintf(a.Stderr, "%s: done.\n", use)
					return nil
				}
				return a.show(body, v)
			},
		}
	}
	one := view{columns: tokenView.columns}
	show := byID("show", "Show one API token", func(ctx context.Context, c *client.Client, id int64) (any, error) {
		return c.API.GetTokenWithResponse(ctx, id)
	}, one)
	usage := byID("usage", "When and from where a token was last used", func(ctx context.Context, c *client.Client, id int64) (any, error) {
		return c.API.GetTokenUsageWithResponse(ctx, id)
	}, view{columns: []string{"token_id", "is_active", "is_expired", "last_used_at", "last_used_ip", "pending_uses"}})
	regen := byID("regenerate", "Replace a token's secret (the old one stops working; the new one is shown once)", func(ctx context.Context, c *client.Client, id int64) (any, error) {
		return c.API.RegenerateTokenWithResponse(ctx, id)
	}, view{columns: []string{"id", "name", "scopes", "expires_at", "token"}})
	revoke := byID("revoke", "Revoke a token", func(ctx context.Context, c *client.Client, id int64) (any, error) {
		return c.API.RevokeTokenWithResponse(ctx, id)
	}, one)

	var format string
	export := &cobra.Command{
		Use: "export", Short: "Export your tokens' records (never their secrets) as CSV or JSON", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			f := api.ExportTokensParamsFormat(strings.ToLower(format))
			resp, err := c.API.ExportTokensWithResponse(ctxOf(cmd), &api.ExportTokensParams{Format: &f})
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			_, err = a.Stdout.Write(resp.Body)
			return err
		},
	}
	export.Flags().StringVar(&format, "format", "csv", "csv or json")
	cmd.AddCommand(list, create, show, usage, regen, revoke, export)
	return cmd
}
