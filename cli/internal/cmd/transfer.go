package cmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client/api"
)

var operationView = view{rows: "items", columns: []string{"kind", "id", "status", "attempt", "last_error_type", "last_error", "created_at"}}

func (a *App) transferCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "transfer", Short: "Operators: the transfer pipeline (session JWT of an admin or operator)"}
	var watch bool
	overview := &cobra.Command{
		Use: "overview [--watch]", Short: "The funnel: packages by state, operations by kind and status", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			if watch {
				return a.watchOverview(ctxOf(cmd), c.BaseURL, tok)
			}
			resp, err := c.API.TransferOverviewWithResponse(ctxOf(cmd))
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.showOverview(resp.Body)
		},
	}
	overview.Flags().BoolVar(&watch, "watch", false, "keep showing it as it changes (WebSocket /api/transfer/ws/overview)")

	var pg paging
	var kind string
	failures := &cobra.Command{
		Use: "failures [--kind KIND]", Short: "Failed operations (GET /api/transfer/operations?status=FAILED)", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			body, err := pg.list(ctxOf(cmd), tok, func(ctx context.Context, limit, offset int64) (any, error) {
				s := api.ListOperationsParamsStatusFAILED
				p := &api.ListOperationsParams{Limit: &limit, Offset: &offset, Status: &s}
				if kind != "" {
					k := api.ListOperationsParamsKind(kind)
					p.Kind = &k
				}
				return c.API.ListOperationsWithResponse(ctx, p)
			})
			if err != nil {
				return err
			}
			return a.show(body, operationView)
		},
	}
	pg.flags(failures)
	failures.Flags().StringVar(&kind, "kind", "", "only operations of this kind")

	var allFailed, dryRun, yes bool
	var reason string
	reset := &cobra.Command{
		Use:   "reset KIND ID | reset --all-failed KIND",
		Short: "Reset failed operations so they run again (dry run shown first; asks unless --yes)",
		Long: "KIND: raw_data_package, data_transfer_package, transfer, unpack, long_term_archive, staging.\n" +
			"The dry run is always asked for first and shown; then, unless --dry-run, you are asked to confirm (or pass --yes).",
		Example: "  obsops transfer reset transfer 42 --reason \"disk replaced\"\n  obsops transfer reset --all-failed transfer --yes",
		Args: func(_ *cobra.Command, args []string) error {
			if allFailed && len(args) != 1 || !allFailed && len(args) != 2 {
				return usagef("expected KIND ID, or --all-failed KIND")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			var r *string
			if reason != "" {
				r = &reason
			}
			do := func(dry bool) ([]byte, error) {
				if allFailed {
					resp, err := c.API.ResetAllFailedWithResponse(ctxOf(cmd), api.ResetAllFailedParamsKind(args[0]), &api.ResetAllFailedParams{DryRun: &dry, Reason: r})
					if err := checkResp(tok, resp, err); err != nil {
						return nil, err
					}
					return resp.Body, nil
				}
				id, err := parseID(args[1], "ID")
				if err != nil {
					return nil, err
				}
				resp, err := c.API.ResetOperationWithResponse(ctxOf(cmd), api.ResetOperationParamsKind(args[0]), id, &api.ResetOperationParams{DryRun: &dry, Reason: r})
				if err := checkResp(tok, resp, err); err != nil {
					return nil, err
				}
				return resp.Body, nil
			}
			v := view{columns: []string{"kind", "id", "status", "attempt", "last_error"}}
			if allFailed {
				v = view{columns: []string{"dry_run", "count", "ids"}}
			}
			body, err := do(true)
			if err != nil {
				return err
			}
			if dryRun {
				return a.show(body, v)
			}
			if !yes {
				fmt.Fprintln(a.Stderr, "Dry run:")
				if err := render(a.Stderr, outTable, body, v); err != nil {
					return err
				}
				fmt.Fprint(a.Stderr, "Reset? [y/N] ")
				line, _ := bufio.NewReader(a.Stdin).ReadString('\n')
				if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
					return fmt.Errorf("not confirmed: nothing was reset")
				}
			}
			body, err = do(false)
			if err != nil {
				return err
			}
			return a.show(body, v)
		},
	}
	reset.Flags().BoolVar(&allFailed, "all-failed", false, "every failed operation of KIND")
	reset.Flags().BoolVar(&dryRun, "dry-run", false, "only show what would be reset")
	reset.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	reset.Flags().StringVar(&reason, "reason", "", "why (kept in the audit)")

	reconcile := &cobra.Command{
		Use: "reconcile", Short: "Reconcile packages whose state disagrees with their operations", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.ReconcileInconsistentWithResponse(ctxOf(cmd))
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, view{columns: []string{"count", "changes"}})
		},
	}
	cmd.AddCommand(overview, failures, reset, reconcile)
	return cmd
}

// showOverview shows the overview: in a table, one row per counter.
func (a *App) showOverview(body []byte) error {
	if a.output == outJSON {
		return a.show(body, view{})
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	var rows []map[string]any
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(strings.TrimPrefix(prefix+"."+k, "."), e)
			}
		default:
			rows = append(rows, map[string]any{"counter": prefix, "value": x})
		}
	}
	for _, k := range []string{"funnel", "packages", "operations", "data_transfer_packages"} {
		walk(k, doc[k])
	}
	sortRows(rows)
	b, _ := json.Marshal(rows)
	if a.output == outTable {
		fmt.Fprintf(a.Stdout, "generated_at %v  seq %v\n", doc["generated_at"], doc["seq"])
	}
	return a.show(b, view{columns: []string{"counter", "value"}})
}

func sortRows(rows []map[string]any) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && fmt.Sprint(rows[j]["counter"]) < fmt.Sprint(rows[j-1]["counter"]); j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// watchOverview shows each overview the WebSocket sends until interrupted.
func (a *App) watchOverview(ctx context.Context, base, tok string) error {
	u := "ws" + strings.TrimPrefix(base, "http") + "/api/transfer/ws/overview"
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return fmt.Errorf("connect %s: %w", u, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if a.output == outTable && isTerminal(a.Stdout) {
			fmt.Fprint(a.Stdout, "\033[H\033[2J")
		}
		if err := a.showOverview(msg); err != nil {
			return err
		}
	}
}

func (a *App) siteCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "site", Short: "This site: its buffer, replica lag, reachability of the main site"}
	cmd.AddCommand(&cobra.Command{
		Use: "status", Short: "Health of this site (GET /health): database, replica, buffer, main site", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			resp, err := c.API.GetHealthWithResponse(ctxOf(cmd))
			hr, _ := outcome(resp)
			// 503 is a health answer too (something is down): show it, then exit 1.
			if err != nil || hr == nil || (hr.StatusCode != http.StatusOK && hr.StatusCode != http.StatusServiceUnavailable) {
				return checkResp(tok, resp, err)
			}
			if a.output == outTable {
				if err := a.showFlat(resp.Body); err != nil {
					return err
				}
			} else if err := a.show(resp.Body, view{}); err != nil {
				return err
			}
			if hr.StatusCode != http.StatusOK {
				return fmt.Errorf("the site is not healthy (status %d)", hr.StatusCode)
			}
			return nil
		},
	})
	return cmd
}

// showFlat shows a JSON object as KEY VALUE rows (nested keys dotted).
func (a *App) showFlat(body []byte) error {
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	var rows []map[string]any
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, e := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), e)
			}
			return
		}
		rows = append(rows, map[string]any{"counter": prefix, "value": v})
	}
	walk("", doc)
	sortRows(rows)
	b, _ := json.Marshal(rows)
	return render(a.Stdout, outTable, b, view{columns: []string{"counter", "value"}})
}
