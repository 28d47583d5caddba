package ingest

import (
	"context"
	"encoding/json"
	"sort"
	"time"
)

// Store is what the use cases need of the database (services/ingest/postgres implements it; at
// a secondary site it reads the local replica): reference checks, reads, and the two direct
// writes. A missing row of a direct write is an error wrapping problem.ErrNotFound; a change the
// row's state forbids, a *ConflictError.
type Store interface {
	// ObsUnitExists reports whether a planned obs unit exists.
	ObsUnitExists(ctx context.Context, id int64) (bool, error)
	// ModuleExists reports whether an instrument module exists.
	ModuleExists(ctx context.Context, id int64) (bool, error)
	// ModuleAllowed reports whether an execution of the obs unit may run on the module: a
	// module of the instrument the obs unit was planned for.
	ModuleAllowed(ctx context.Context, obsUnit, module int64) (bool, error)
	// ExistingIDs reports which ids have a row in table.
	ExistingIDs(ctx context.Context, table string, ids []string) (map[string]bool, error)
	// PackageInfos returns status, execution and module of each committed package among ids.
	PackageInfos(ctx context.Context, ids []string) (map[string]PackageInfo, error)
	// FilesByIDOrPath returns the registered files having one of ids or one of the (module,
	// path) pairs (modules[i], paths[i]), in one query.
	FilesByIDOrPath(ctx context.Context, ids []string, modules []int64, paths []string) ([]RawDataFile, error)
	// PackagesByIDOrName returns the packages with id or named name in execution eou.
	PackagesByIDOrName(ctx context.Context, id, eou, name string) ([]PackageRow, error)
	// ExecutedObsUnit returns an execution (nil if none) and whether its finish is applied.
	ExecutedObsUnit(ctx context.Context, id string) (*ExecutedObsUnit, bool, error)
	// ExecutionsOf returns the executions of an obs unit (at most max) and which are finished.
	ExecutionsOf(ctx context.Context, obsUnitID int64, max int) ([]ExecutedObsUnit, map[string]bool, error)
	// FinishedExecutions returns those of ids whose finish is applied.
	FinishedExecutions(ctx context.Context, ids []string) (map[string]ExecutedObsUnit, error)
	// File returns a registered file, or nil.
	File(ctx context.Context, id string) (*RawDataFile, error)
	// Files returns the registered files among ids, by id.
	Files(ctx context.Context, ids []string) (map[string]RawDataFile, error)
	// Package returns a package row, or nil.
	Package(ctx context.Context, id string) (*PackageRow, error)
	// PackageFiles returns the committed files of a package ordered as SortFiles, at most max.
	PackageFiles(ctx context.Context, id string, max int) ([]RawDataFile, error)
	// UpdateFile changes a file; buffered is its registration still held (applied first). may
	// (nil: any) is asked about the file's module once its row is locked; its error is returned
	// with nothing changed.
	UpdateFile(ctx context.Context, id string, u FileUpdate, buffered *FilesTask, may ModuleCheck) (*RawDataFile, error)
	// Finalize makes a package complete; buffered is its create still held (applied first). may
	// (nil: any) is asked about the package's module once its row is locked, as for UpdateFile.
	Finalize(ctx context.Context, id string, f Finalize, buffered *PackageTask, may ModuleCheck) (row *PackageRow, changed bool, err error)
}

// Direct applies the critical writes to the database at once (buffering disabled), with the
// worker's statements (postgres.Applier).
type Direct interface {
	// ApplyStart, ApplyFinish, ApplyFiles and ApplyPackage apply one task each, in a transaction
	// of its own; a write the database refuses for good is a *PermanentError.
	ApplyStart(ctx context.Context, t StartTask) (Commit, error)
	ApplyFinish(ctx context.Context, t FinishTask) (Commit, error)
	ApplyFiles(ctx context.Context, t FilesTask) (Commit, error)
	ApplyPackage(ctx context.Context, t PackageTask) (Commit, error)
}

// Commit is the outcome of an applied task.
type Commit struct {
	LSN string    // WAL position after the commit
	At  time.Time // when COMMIT returned (the worker's clock)
}

// PermanentError is a task that can never apply (e.g. its obs unit was deleted): it goes to the
// dead letters with this error instead of being retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// PackageInfo is what a file joining a committed package is checked against.
type PackageInfo struct {
	Status             string
	ExecutedObsUnitID  string
	InstrumentModuleID int64
}

// PackageRow is a package as stored, with what finalize compares (FileIDs: its members).
type PackageRow struct {
	Package      RawDataPackage
	FileIDs      []string
	FinalizeHash string
}

// MergeMeta lays a finish's meta over a start's (both JSON objects).
func MergeMeta(start, finish json.RawMessage) json.RawMessage {
	if len(finish) == 0 || string(finish) == "{}" {
		if len(start) == 0 {
			return json.RawMessage("{}")
		}
		return start
	}
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(start, &m)
	f := map[string]json.RawMessage{}
	_ = json.Unmarshal(finish, &f)
	for k, v := range f {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// SortFiles orders files as Store.PackageFiles does: by path, then id.
func SortFiles(files []RawDataFile) {
	sort.Slice(files, func(i, j int) bool {
		if files[i].Path != files[j].Path {
			return files[i].Path < files[j].Path
		}
		return files[i].ID < files[j].ID
	})
}
