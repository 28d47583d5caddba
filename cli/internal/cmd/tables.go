package cmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client/api"
)

// Target lists in (source import) and pictures out (heatmap, visibility --plot): the commands
// whose bodies are files rather than JSON.

// importCommand is `obsops source import FILE`: a CSV or VOTable target list, all or nothing.
func (a *App) importCommand() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import a target list (CSV or VOTable): every source or none; --dry-run shows what would be created",
		Long: "FILE is CSV (.csv) or VOTable (.vot, .votable, .xml) with the columns of `obsops source search -o csv`:\n" +
			"name, ra and dec (degrees or sexagesimal), epoch, pmra, pmdec, parallax, rv, kind, aliases (';'), ...\n" +
			"Every refusal names the row and column; nothing is stored unless every row is valid.",
		Example: "  obsops source import targets.csv --dry-run\n  obsops source import targets.vot",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := os.ReadFile(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			ct := "text/csv"
			switch strings.ToLower(filepath.Ext(args[0])) {
			case ".vot", ".votable", ".xml":
				ct = "application/x-votable+xml"
			}
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			resp, err := c.API.ImportSourcesWithBodyWithResponse(ctxOf(cmd), &api.ImportSourcesParams{DryRun: &dryRun}, ct, bytes.NewReader(body))
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			if err := a.show(resp.Body, view{rows: "sources", columns: []string{"row", "name", "id"}}); err != nil {
				return err
			}
			if r := resp.JSON200; r != nil && a.output == outTable {
				verb := "created"
				if dryRun {
					verb = "would be created"
				}
				fmt.Fprintf(a.Stdout, "\n%d sources %s", r.Created, verb)
				if r.Existing != nil && len(*r.Existing) > 0 {
					fmt.Fprintf(a.Stdout, "; %d names already exist:", len(*r.Existing))
					for _, e := range *r.Existing {
						fmt.Fprintf(a.Stdout, " %s (row %d)", e.Name, e.Row)
					}
				}
				fmt.Fprintln(a.Stdout)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check everything, store nothing")
	return cmd
}

// heatmapCommand is `obsops heatmap`: hours observable per day of a year, drawn or as CSV.
func (a *App) heatmapCommand() *cobra.Command {
	var program int64
	var sources string
	var year int64
	var file string
	cmd := &cobra.Command{
		Use:   "heatmap (--program ID | --sources ID,ID...) --year YEAR --file heat.png",
		Short: "A year's visibility heatmap of a program's sources, written to a PNG, SVG or CSV file",
		Example: "  obsops heatmap --program 3 --year 2027 --file heat.png\n" +
			"  obsops heatmap --sources 1,2,5 --year 2027 --file heat.csv",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (program == 0) == (sources == "") {
				return usagef("give --program or --sources")
			}
			format, err := fileFormat(file, "png", "svg", "csv")
			if err != nil {
				return err
			}
			c, tok, err := a.client(false)
			if err != nil {
				return err
			}
			f := api.GetVisibilityHeatmapParamsFormat(format)
			p := &api.GetVisibilityHeatmapParams{Year: year, Format: &f}
			if program != 0 {
				p.ProgramId = &program
			} else {
				p.SourceIds = &sources
			}
			resp, err := c.API.GetVisibilityHeatmapWithResponse(ctxOf(cmd), p)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.writeFile(file, resp.Body)
		},
	}
	cmd.Flags().Int64Var(&program, "program", 0, "the program whose obs units' sources to draw")
	cmd.Flags().StringVar(&sources, "sources", "", "source ids, comma-separated (instead of --program)")
	cmd.Flags().Int64Var(&year, "year", 0, "calendar year (required)")
	cmd.Flags().StringVar(&file, "file", "", "where to write it: .png, .svg or .csv (required)")
	_ = cmd.MarkFlagRequired("year")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// fileFormat is the format a file's extension names, one of allowed.
func fileFormat(file string, allowed ...string) (string, error) {
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
	for _, f := range allowed {
		if ext == f {
			return f, nil
		}
	}
	return "", usagef("%q: the file's extension must be one of .%s", file, strings.Join(allowed, ", ."))
}

// writeFile writes an answer's body to path and says so.
func (a *App) writeFile(path string, body []byte) error {
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "wrote %s (%d bytes)\n", path, len(body))
	return nil
}
