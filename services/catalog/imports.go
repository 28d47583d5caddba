package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/obsops/obsops/pkg/problem"
)

// ImportRow is one source of an uploaded target list (POST /sources/import), normalized by
// SourceSpec.Normalize, with the file line it starts on for messages.
type ImportRow struct {
	Spec SourceSpec
	Line int
}

// TakenName is a name or alias of an import that another source already answers to.
type TakenName struct {
	Index    int    // the import row (0-based) that asks for it
	Name     string // the name or alias as the row writes it
	SourceID int64  // the source that has it
	Source   string // that source's name
}

// ImportResult is the answer of an import: what was created (or, in a dry run, would be) and the
// names that already exist (a dry run lists them; a real import with any is refused instead).
type ImportResult struct {
	DryRun   bool             `json:"dry_run"`
	Created  int              `json:"created" doc:"Sources created (dry run: that would be created)."`
	Sources  []ImportedSource `json:"sources"`
	Existing []ExistingName   `json:"existing" doc:"Names of the file that are already a source's name or alias (dry run; a real import refuses them)."`
}

// ImportedSource is one row of an import's answer.
type ImportedSource struct {
	Row  int    `json:"row" doc:"Data row of the file, from 1."`
	Name string `json:"name"`
	ID   *int64 `json:"id" doc:"The new source's id; null in a dry run."`
}

// ExistingName is a name of the file some source already answers to.
type ExistingName struct {
	Row      int    `json:"row"`
	Name     string `json:"name"`
	SourceID int64  `json:"source_id"`
	Source   string `json:"source"`
}

// ImportSources creates every source of a target list, or none: a row's invalid field, two rows
// sharing a name or alias, or a name another source answers to is a 422 naming the row and the
// column, and nothing is stored. dryRun checks everything and answers what would be created and
// which names already exist, storing nothing. Rows are at most MaxImportRows (tables.ReadSources
// refuses more before they reach here).
func (s *Service) ImportSources(ctx context.Context, caller Caller, rows []ImportRow, dryRun bool) (ImportResult, error) {
	if err := duplicateNames(rows); err != nil {
		return ImportResult{}, err
	}
	specs := make([]SourceSpec, len(rows))
	for i, r := range rows {
		specs[i] = r.Spec
	}
	ids, taken, err := s.Store.ImportSources(ctx, specs, caller.Name, dryRun)
	if err != nil {
		return ImportResult{}, err
	}
	if len(taken) > 0 && !dryRun {
		errs := make([]error, 0, len(taken))
		for _, t := range taken {
			errs = append(errs, problem.Field(fmt.Sprintf("body.rows[%d].name", t.Index+1),
				fmt.Sprintf("line %d: %q is already a name or alias of source %q (id %d)", rows[t.Index].Line, t.Name, t.Source, t.SourceID), t.Name))
		}
		return ImportResult{}, errors.Join(errs...)
	}
	out := ImportResult{DryRun: dryRun, Sources: make([]ImportedSource, 0, len(rows)), Existing: []ExistingName{}}
	skip := map[int]bool{}
	for _, t := range taken {
		skip[t.Index] = true
		out.Existing = append(out.Existing, ExistingName{Row: t.Index + 1, Name: t.Name, SourceID: t.SourceID, Source: t.Source})
	}
	for i, r := range rows {
		if skip[i] {
			continue
		}
		is := ImportedSource{Row: i + 1, Name: r.Spec.Name}
		if !dryRun {
			is.ID = &ids[i]
		}
		out.Sources = append(out.Sources, is)
	}
	out.Created = len(out.Sources)
	return out, nil
}

// duplicateNames refuses two rows answering to the same name (names and aliases, case and
// spaces ignored, as the database's one index over them does).
func duplicateNames(rows []ImportRow) error {
	first := map[string]int{}
	var errs []error
	for i, r := range rows {
		for _, n := range append([]string{r.Spec.Name}, r.Spec.Aliases...) {
			k := NameKey(n)
			j, ok := first[k]
			switch {
			case !ok:
				first[k] = i
			case j != i:
				errs = append(errs, problem.Field(fmt.Sprintf("body.rows[%d].name", i+1),
					fmt.Sprintf("line %d: %q is also a name or alias of row %d (line %d)", r.Line, n, j+1, rows[j].Line), n))
			}
			if len(errs) >= problem.MaxErrors {
				return errors.Join(errs...)
			}
		}
	}
	return errors.Join(errs...)
}
