package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
)

var programView = view{rows: "items", columns: []string{"id", "short_name", "title", "pi", "status", "allocated_hours"}}

// readSpec reads a program from a YAML (or JSON) file, "-" for standard input, with the API's
// field names (short_name, title, pi, status, allocated_hours, description, obs_units).
func readSpec[T any](a *App, path string) (T, error) {
	var spec T
	var b []byte
	var err error
	if path == "-" {
		b, err = readAllFrom(a.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return spec, err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return spec, fmt.Errorf("%s: %w", path, err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return spec, fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(j)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

func readAllFrom(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
	}
}

func (a *App) programCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "program", Aliases: []string{"programs"}, Short: "Observing programs"}
	var pg paging
	var status, pi, q string
	list := &cobra.Command{
		Use: "list", Short: "List programs (filters: --status, --pi, --q)", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			body, err := pg.list(ctxOf(cmd), tok, func(ctx context.Context, limit, offset int64) (any, error) {
				p := &api.ListProgramsParams{Limit: &limit, Offset: &offset}
				if status != "" {
					s := api.ListProgramsParamsStatus(status)
					p.Status = &s
				}
				if pi != "" {
					p.Pi = &pi
				}
				if q != "" {
					p.Q = &q
				}
				return c.API.ListProgramsWithResponse(ctx, p)
			})
			if err != nil {
				return err
			}
			return a.show(body, programView)
		},
	}
	pg.flags(list)
	list.Flags().StringVar(&status, "status", "", "only programs with this status")
	list.Flags().StringVar(&pi, "pi", "", "only programs of this PI")
	list.Flags().StringVar(&q, "q", "", "short name or title contains")

	show := &cobra.Command{
		Use: "show ID", Short: "Show a program with its obs units", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, tok, err := a.clientForID(args[0], false)
			if err != nil {
				return err
			}
			resp, err := c.API.GetProgramWithResponse(ctxOf(cmd), id, nil)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			if a.output == outTable {
				if err := a.show(resp.Body, view{columns: programView.columns}); err != nil {
					return err
				}
				fmt.Fprintln(a.Stdout)
				return a.show(resp.Body, view{rows: "obs_units", columns: []string{"id", "name", "source_id", "instrument_module_id", "duration_s", "priority", "min_elevation_deg"}})
			}
			return a.show(resp.Body, view{columns: programView.columns})
		},
	}

	var file string
	create := &cobra.Command{
		Use: "create -f program.yaml", Short: "Create a program (with its obs units) from a YAML file",
		Example: "  obsops program create -f program.yaml\n\n  # program.yaml\n  short_name: ORION-1\n  title: Orion KL line survey\n  pi: alice\n  obs_units:\n    - {name: u1, source_id: 1, instrument_module_id: 1, duration_s: 600}",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := readSpec[api.ProgramSpec](a, file)
			if err != nil {
				return err
			}
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.CreateProgramWithResponse(ctxOf(cmd), spec)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, view{columns: programView.columns})
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", "the program, YAML or JSON (- for standard input)")
	_ = create.MarkFlagRequired("file")

	var editFile string
	edit := &cobra.Command{
		Use:   "edit ID [-f program.yaml]",
		Short: "Replace a program: from a file, or in $EDITOR starting from the current one",
		Long: "Replaces the program's fields and its obs units (matched by name: kept, created, deleted). Without -f the\n" +
			"program opens in $EDITOR (default vi) as YAML; saving replaces it.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, tok, err := a.clientForID(args[0], true)
			if err != nil {
				return err
			}
			if editFile == "" {
				if editFile, err = a.editProgram(ctxOf(cmd), c, tok, id); err != nil {
					return err
				}
				defer os.Remove(editFile)
			}
			spec, err := readSpec[api.ProgramReplacement](a, editFile)
			if err != nil {
				return err
			}
			resp, err := c.API.ReplaceProgramWithResponse(ctxOf(cmd), id, spec)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, view{columns: programView.columns})
		},
	}
	edit.Flags().StringVarP(&editFile, "file", "f", "", "the new program, YAML or JSON")

	del := &cobra.Command{
		Use: "delete ID", Short: "Delete a program and its obs units", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, tok, err := a.clientForID(args[0], true)
			if err != nil {
				return err
			}
			resp, err := c.API.DeleteProgramWithResponse(ctxOf(cmd), id)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "Program %d deleted.\n", id)
			return nil
		},
	}
	cmd.AddCommand(list, show, create, edit, del)
	return cmd
}

// editProgram writes program id as YAML to a temporary file, opens it in $EDITOR and returns
// the file.
func (a *App) editProgram(ctx context.Context, c *client.Client, tok string, id int64) (string, error) {
	resp, err := c.API.GetProgramWithResponse(ctx, id, nil)
	if err := checkResp(tok, resp, err); err != nil {
		return "", err
	}
	p := resp.JSON200
	spec := map[string]any{"short_name": p.ShortName, "title": p.Title, "pi": p.Pi, "status": p.Status, "description": p.Description}
	if p.AllocatedHours != nil {
		spec["allocated_hours"] = *p.AllocatedHours
	}
	var units []map[string]any
	for _, u := range client.Deref(p.ObsUnits) {
		b, _ := json.Marshal(u)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		keep := map[string]any{}
		for _, k := range []string{"name", "source_id", "instrument_module_id", "duration_s", "priority", "min_elevation_deg"} {
			if v, ok := m[k]; ok && v != nil {
				keep[k] = v
			}
		}
		units = append(units, keep)
	}
	spec["obs_units"] = units
	b, err := yaml.Marshal(spec)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "obsops-program-*.yaml")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	editor := os.Getenv("EDITOR")
	if editor == "" {
		editor = "vi"
	}
	ed := exec.Command("sh", "-c", editor+` "$1"`, "sh", f.Name())
	ed.Stdin, ed.Stdout, ed.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := ed.Run(); err != nil {
		return "", fmt.Errorf("editor: %w", err)
	}
	return f.Name(), nil
}

var sourceView = view{rows: "items", columns: []string{"id", "name", "ra_deg", "dec_deg", "kind"}}

func (a *App) sourceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "source", Aliases: []string{"sources"}, Short: "Sources: cone searches and name resolution"}
	var pg paging
	var near, q, kind string
	var radius float64
	search := &cobra.Command{
		Use:     "search [--near NAME --radius DEG] [--q TEXT]",
		Short:   "Search sources: around a name or coordinates (cone), or by name",
		Example: "  obsops source search --near \"Orion KL\" --radius 0.5\n  obsops source search --near \"83.82 -5.39\" --radius 1 --output csv",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			p := api.ListSourcesParams{}
			if q != "" {
				p.Q = &q
			}
			if kind != "" {
				k := api.ListSourcesParamsKind(kind)
				p.Kind = &k
			}
			if near != "" {
				if radius <= 0 {
					return usagef("--radius (degrees, > 0) is required with --near")
				}
				ans, err := a.resolve(ctxOf(cmd), c, tok, []string{near})
				if err != nil {
					return err
				}
				if !ans[0].Found || ans[0].RaDeg == nil || ans[0].DecDeg == nil {
					return fmt.Errorf("%q: name not resolved%s", near, errText(ans[0].Error))
				}
				ra, dec, r := num(*ans[0].RaDeg), num(*ans[0].DecDeg), num(radius)
				p.RaDeg, p.DecDeg, p.RadiusDeg = &ra, &dec, &r
				fmt.Fprintf(a.Stderr, "%s resolved to RA %s, Dec %s (%s)\n", near, ra, dec, client.Deref(ans[0].Resolver))
			}
			body, err := pg.list(ctxOf(cmd), tok, func(ctx context.Context, limit, offset int64) (any, error) {
				p := p
				p.Limit, p.Offset = &limit, &offset
				return c.API.ListSourcesWithResponse(ctx, &p)
			})
			if err != nil {
				return err
			}
			return a.show(body, sourceView)
		},
	}
	pg.flags(search)
	search.Flags().StringVar(&near, "near", "", "a name or coordinates (\"83.82 -5.39\", \"05h35m -05d23m\") to search around")
	search.Flags().Float64Var(&radius, "radius", 0, "cone radius in degrees (with --near)")
	search.Flags().StringVar(&q, "q", "", "name contains")
	search.Flags().StringVar(&kind, "kind", "", "only sources of this kind")

	resolve := &cobra.Command{
		Use: "resolve NAME...", Short: "Resolve names to ICRS coordinates (1-100)", Args: minArgs(1),
		Example: "  obsops source resolve M42 Betelgeuse \"05h35m17.3s -05d23m28s\"",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			resp, err := c.API.ResolveNamesWithResponse(ctxOf(cmd), api.ResolveBody{Names: &args})
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			if err := a.show(resp.Body, view{rows: "items", columns: []string{"input", "found", "name", "ra_deg", "dec_deg", "resolver", "kind"}}); err != nil {
				return err
			}
			for _, it := range client.Deref(resp.JSON200.Items) {
				if !it.Found {
					return fmt.Errorf("not resolved: %s", it.Input)
				}
			}
			return nil
		},
	}
	cmd.AddCommand(search, resolve, a.importCommand())
	return cmd
}

func errText(s *string) string {
	if s == nil || *s == "" {
		return ""
	}
	return ": " + *s
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// resolve resolves names through POST /sources/resolve.
func (a *App) resolve(ctx context.Context, c *client.Client, tok string, names []string) ([]api.Answer, error) {
	resp, err := c.API.ResolveNamesWithResponse(ctx, api.ResolveBody{Names: &names})
	if err := checkResp(tok, resp, err); err != nil {
		return nil, err
	}
	items := client.Deref(resp.JSON200.Items)
	if len(items) != len(names) {
		return nil, errors.New("the resolver answered another number of names")
	}
	return items, nil
}

// sourceID finds a source by id or exact name (any case).
func (a *App) sourceID(ctx context.Context, c *client.Client, tok, s string) (int64, error) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
		return id, nil
	}
	limit := int64(100)
	resp, err := c.API.ListSourcesWithResponse(ctx, &api.ListSourcesParams{Q: &s, Limit: &limit})
	if err := checkResp(tok, resp, err); err != nil {
		return 0, err
	}
	for _, src := range client.Deref(resp.JSON200.Items) {
		if strings.EqualFold(src.Name, s) {
			return src.Id, nil
		}
	}
	return 0, fmt.Errorf("no source named %q in the catalog (obsops source search --q %q)", s, s)
}

func (a *App) visibilityCommand() *cobra.Command {
	var night, plot string
	var step, unit int64
	var minEl float64
	cmd := &cobra.Command{
		Use:   "visibility SOURCE --night DATE [--obs-unit ID] [--plot out.svg|out.png]",
		Short: "Altitude of a source over one night at the site (samples; --output csv for a table)",
		Long: "SOURCE is a source id or its exact name. The night of DATE runs from DATE 20:00 UTC to DATE+1 12:00 UTC\n" +
			"(evening to morning at the FYST site, UTC-3).",
		Example: "  obsops visibility \"Orion KL\" --night 2026-12-01\n  obsops visibility 12 --night 2026-12-01 --output csv > orion.csv\n" +
			"  obsops visibility \"Orion KL\" --night 2026-12-01 --plot orion.png\n  obsops visibility 12 --night 2026-12-01 --obs-unit 7",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.Parse("2006-01-02", night)
			if err != nil {
				return usagef("--night must be a date, YYYY-MM-DD, not %q", night)
			}
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			id, err := a.sourceID(ctxOf(cmd), c, tok, args[0])
			if err != nil {
				return err
			}
			start := d.Add(20 * time.Hour).Format(time.RFC3339)
			end := d.Add(36 * time.Hour).Format(time.RFC3339)
			p := &api.GetVisibilityParams{Start: &start, End: &end}
			if step > 0 {
				p.StepS = &step
			}
			if cmd.Flags().Changed("min-elevation") {
				p.MinElevationDeg = &minEl
			}
			if unit != 0 {
				p.ObsUnitId = &unit
			}
			if plot != "" {
				format, err := fileFormat(plot, "svg", "png")
				if err != nil {
					return err
				}
				f := api.GetVisibilityParamsFormat(format)
				p.Format = &f
				resp, err := c.API.GetVisibilityWithResponse(ctxOf(cmd), id, p)
				if err := checkResp(tok, resp, err); err != nil {
					return err
				}
				return a.writeFile(plot, resp.Body)
			}
			resp, err := c.API.GetVisibilityWithResponse(ctxOf(cmd), id, p)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			if a.output == outTable {
				if err := a.show(resp.Body, view{columns: []string{"rise", "transit", "set", "max_alt_deg", "hours_observable", "min_elevation_deg"}}); err != nil {
					return err
				}
				fmt.Fprintln(a.Stdout)
				if unit != 0 { // the windows under the obs unit's constraints, with why each starts and ends
					if err := a.show(resp.Body, view{rows: "windows", columns: []string{"start", "end", "start_reason", "end_reason", "unknown_constraints"}}); err != nil {
						return err
					}
					fmt.Fprintln(a.Stdout)
				}
			}
			if a.output == outJSON {
				return a.show(resp.Body, view{})
			}
			return a.show(resp.Body, view{rows: "samples", columns: []string{"time", "alt_deg", "az_deg", "airmass", "observable", "sun_sep_deg"}})
		},
	}
	cmd.Flags().StringVar(&night, "night", "", "the night's date, YYYY-MM-DD (required)")
	cmd.Flags().Int64Var(&step, "step", 0, "seconds between samples (default: the server's)")
	cmd.Flags().Float64Var(&minEl, "min-elevation", 0, "minimum elevation in degrees (default: the server's)")
	cmd.Flags().Int64Var(&unit, "obs-unit", 0, "apply this obs unit's constraints (airmass, Moon, PWV, LST range, time windows…); lists the windows")
	cmd.Flags().StringVar(&plot, "plot", "", "write the night's altitude plot to this file (.svg or .png) instead of the samples")
	_ = cmd.MarkFlagRequired("night")
	return cmd
}
