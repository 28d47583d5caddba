package ingest

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/problem"
)

// The reference rules of the buffered writes: every referenced record exists (in the buffer or
// the database), no file joins a complete package, a client-chosen id is not registered with
// other content, and the integrity rules of issue 23 (docs/api.md, "Integrity rules"): a file
// belongs to at most one package, of its execution and module; a package name is unique in its
// execution; a path is unique per instrument module; an execution ends after it starts; an
// execution runs on a module of its obs unit's instrument.

// checkObsUnit refuses (422 at loc) an obs unit that does not exist.
func (s *Service) checkObsUnit(ctx context.Context, id int64, loc string) error {
	ok, err := s.obsUnitExists(ctx, id)
	if err == nil && !ok {
		return problem.Field(loc, "no such obs unit", id)
	}
	return err
}

// obsUnitExists reports whether a planned obs unit exists (remembered once seen).
func (s *Service) obsUnitExists(ctx context.Context, id int64) (bool, error) {
	key := "ou:" + strconv.FormatInt(id, 10)
	if s.known.has(key) {
		return true, nil
	}
	ok, err := s.Store.ObsUnitExists(ctx, id)
	if err != nil {
		return false, dbErr(err)
	}
	if ok {
		s.known.add(key)
	}
	return ok, nil
}

// checkModule refuses (422 at loc) an instrument module that does not exist.
func (s *Service) checkModule(ctx context.Context, id int64, loc string) error {
	ok, err := s.Store.ModuleExists(ctx, id)
	if err != nil {
		return dbErr(err)
	}
	if !ok {
		return problem.Field(loc, "no such instrument module", id)
	}
	return nil
}

// checkModuleAllowed refuses (422 at loc) a module an execution of obsUnit may not run on: an
// obs unit is planned for one instrument module, and its executions run on that module or on
// another module of the same instrument (the instrument's receivers and arrays observe the same
// source), never on another instrument's (remembered once seen allowed).
func (s *Service) checkModuleAllowed(ctx context.Context, obsUnit, module int64, loc string) error {
	key := "ou:" + strconv.FormatInt(obsUnit, 10) + "/m:" + strconv.FormatInt(module, 10)
	if s.known.has(key) {
		return nil
	}
	ok, err := s.Store.ModuleAllowed(ctx, obsUnit, module)
	if err != nil {
		return dbErr(err)
	}
	if !ok {
		return problem.Field(loc, "not a module of the instrument obs unit "+strconv.FormatInt(obsUnit, 10)+" is planned for", module)
	}
	s.known.add(key)
	return nil
}

// missingExecutions returns which executed obs units exist neither in the buffer nor in the
// database.
func (s *Service) missingExecutions(ctx context.Context, ids []string) (map[string]bool, error) {
	var ask []string
	for _, id := range ids {
		if !s.known.has("eou:" + id) {
			ask = append(ask, id)
		}
	}
	missing := map[string]bool{}
	if len(ask) == 0 {
		return missing, nil
	}
	inBuffer, err := s.Buffer.Exists(ctx, KindStart, ask...)
	if err != nil {
		return nil, err
	}
	var inDB []string
	for _, id := range ask {
		if inBuffer[id] {
			s.known.add("eou:" + id)
		} else {
			inDB = append(inDB, id)
		}
	}
	found, err := s.Store.ExistingIDs(ctx, "executed_obs_units", inDB)
	if err != nil {
		return nil, dbErr(err)
	}
	for _, id := range inDB {
		if found[id] {
			s.known.add("eou:" + id)
		} else {
			missing[id] = true
		}
	}
	return missing, nil
}

// packageInfos returns what files joining packages are checked against, for those of ids that
// exist: committed (one query), else buffered (one Redis call for the rest; status building).
func (s *Service) packageInfos(ctx context.Context, ids []string) (map[string]PackageInfo, error) {
	infos, err := s.Store.PackageInfos(ctx, ids)
	if err != nil {
		return nil, dbErr(err)
	}
	var uncommitted []string
	for _, p := range ids {
		if _, ok := infos[p]; !ok {
			uncommitted = append(uncommitted, p)
		}
	}
	cached, err := s.Buffer.Get(ctx, KindPackage, uncommitted...)
	if err != nil {
		return nil, err
	}
	for id, c := range cached {
		var r CacheRecord[Package]
		if json.Unmarshal(c.Record, &r) == nil {
			infos[id] = PackageInfo{Status: PackageBuilding, ExecutedObsUnitID: r.R.ExecutedObsUnitID, InstrumentModuleID: r.R.InstrumentModuleID}
		}
	}
	return infos, nil
}

// checkFiles validates the references of files (one or a bulk): modules, executed obs units and
// packages exist, and a named package is of the file's execution and module and is not
// complete. prefix(i) is the location of file i ("body" or "body.files[i]"). Ids and paths are
// checked against committed files by holdFiles (checkCommittedFiles), against buffered ones when
// the write is held (FileClaims).
func (s *Service) checkFiles(ctx context.Context, files []File, prefix func(int) string) error {
	first := map[string]int{} // first file using each reference
	var modules []int64
	var eous, pkgs []string
	for i, f := range files {
		mk := "m" + strconv.FormatInt(f.InstrumentModuleID, 10)
		if _, ok := first[mk]; !ok {
			first[mk] = i
			modules = append(modules, f.InstrumentModuleID)
		}
		if _, ok := first["e"+f.ExecutedObsUnitID]; !ok {
			first["e"+f.ExecutedObsUnitID] = i
			eous = append(eous, f.ExecutedObsUnitID)
		}
		if f.RawDataPackageID != "" {
			if _, ok := first["p"+f.RawDataPackageID]; !ok {
				first["p"+f.RawDataPackageID] = i
				pkgs = append(pkgs, f.RawDataPackageID)
			}
		}
	}
	for _, m := range modules {
		if err := s.checkModule(ctx, m, prefix(first["m"+strconv.FormatInt(m, 10)])+".instrument_module_id"); err != nil {
			return err
		}
	}
	missing, err := s.missingExecutions(ctx, eous)
	if err != nil {
		return err
	}
	var ve ValidationError
	for _, e := range eous {
		if missing[e] {
			ve = append(ve, problem.FieldError{Location: prefix(first["e"+e]) + ".executed_obs_unit_id", Message: "no such executed obs unit", Value: e})
		}
	}
	infos, err := s.packageInfos(ctx, pkgs)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		if _, ok := infos[p]; !ok {
			ve = append(ve, problem.FieldError{Location: prefix(first["p"+p]) + ".raw_data_package_id", Message: "no such raw data package", Value: p})
		}
	}
	for i, f := range files {
		if in, ok := infos[f.RawDataPackageID]; ok && (in.ExecutedObsUnitID != f.ExecutedObsUnitID || in.InstrumentModuleID != f.InstrumentModuleID) {
			ve = append(ve, problem.FieldError{Location: prefix(i) + ".raw_data_package_id",
				Message: "a package's files are of its execution and instrument module: this package's are " + in.ExecutedObsUnitID +
					" and " + strconv.FormatInt(in.InstrumentModuleID, 10), Value: f.RawDataPackageID})
		}
	}
	if len(ve) > 0 {
		return ve
	}
	for _, p := range pkgs {
		if infos[p].Status == PackageComplete {
			return conflict(prefix(first["p"+p]) + ".raw_data_package_id: raw data package " + p + " is complete; no file can join it")
		}
	}
	return nil
}

// checkCommittedFiles refuses files whose client-chosen id a committed file has with other
// content (409 at prefix(i).id), or whose path on their module a committed file of another id
// has (409 at prefix(i).path, rule 2: a path is unique per instrument module), in one query.
// Buffered files of the same path are refused when the write is held (FileClaims); holdFiles
// asks this only when the committed filter cannot rule a conflict out (buffer/committed.go).
func (s *Service) checkCommittedFiles(ctx context.Context, files []File, clientID []bool, prefix func(int) string) error {
	var clientIDs []string
	fileModules, paths := make([]int64, len(files)), make([]string, len(files))
	for i, f := range files {
		if clientID[i] {
			clientIDs = append(clientIDs, f.ID)
		}
		fileModules[i], paths[i] = f.InstrumentModuleID, f.Path
	}
	existing, err := s.Store.FilesByIDOrPath(ctx, clientIDs, fileModules, paths)
	if err != nil {
		return dbErr(err)
	}
	byID := make(map[string]RawDataFile, len(existing))
	byPath := make(map[string]RawDataFile, len(existing))
	for _, r := range existing {
		byID[r.ID] = r
		byPath[strconv.FormatInt(r.InstrumentModuleID, 10)+":"+r.Path] = r
	}
	for i, f := range files {
		if r, ok := byID[f.ID]; ok && clientID[i] && !sameFile(f, r) {
			return conflict(prefix(i) + ".id: file " + f.ID + " is already registered with other content; choose a new id")
		}
		if r, ok := byPath[strconv.FormatInt(f.InstrumentModuleID, 10)+":"+f.Path]; ok && r.ID != f.ID {
			return &PathConflictError{Loc: prefix(i) + ".path", Path: f.Path, Module: f.InstrumentModuleID, ExistingID: r.ID}
		}
	}
	return nil
}

// PathConflictError is a registration of a path its instrument module already has under another
// file id (409, rule 2): the existing file is named so that the instrument can tell a retry of a
// registration it forgot from a second file written over the first.
type PathConflictError struct {
	Loc        string
	Path       string
	Module     int64
	ExistingID string
}

func (e *PathConflictError) Error() string {
	return e.Loc + ": path " + strconv.Quote(e.Path) + " is already registered on instrument module " +
		strconv.FormatInt(e.Module, 10) + " as file " + e.ExistingID + " (a path is unique per instrument module)"
}

// ProblemKind makes it a 409 (problem.Kinded).
func (e *PathConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// MembershipConflictError is a package claiming files that already belong to another package
// (409, rule 1: a file belongs to at most one package), listing them.
type MembershipConflictError struct {
	Loc   string
	Files map[string]string // file id → the package holding it
}

func (e *MembershipConflictError) Error() string {
	ids := make([]string, 0, len(e.Files))
	for f := range e.Files {
		ids = append(ids, f)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, f := range ids {
		parts[i] = f + " (in package " + e.Files[f] + ")"
	}
	return e.Loc + ": a file belongs to at most one package; already in another package: " + strings.Join(parts, ", ")
}

// ProblemKind makes it a 409 (problem.Kinded).
func (e *MembershipConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// sameJSON compares two JSON documents by value (jsonb reorders keys).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// sameFile reports whether a registration repeats a registered file.
func sameFile(f File, r RawDataFile) bool {
	same := f.ExecutedObsUnitID == r.ExecutedObsUnitID && f.InstrumentModuleID == r.InstrumentModuleID && f.Path == r.Path &&
		f.SizeBytes == r.SizeBytes && f.Checksum == r.Checksum && sameJSON(f.Meta, r.Meta)
	if f.CreatedAt != nil && !f.CreatedAt.Equal(r.CreatedAt) {
		return false
	}
	if f.RawDataPackageID != "" && (r.RawDataPackageID == nil || *r.RawDataPackageID != f.RawDataPackageID) {
		return false
	}
	return same
}

// checkPackage validates a package creation (p.ID set; clientID: chosen by the client): module
// and execution exist, the name is not another package's in the execution, and the files (rule
// 1) exist, are of the package's execution and module and belong to no other package. Committed
// rows are checked here (the package lookup by id and name in one query, the files in one);
// buffered packages of the same name or claiming the same files are refused when the write is
// held (PackageClaims).
func (s *Service) checkPackage(ctx context.Context, p Package, clientID bool) error {
	if err := s.checkModule(ctx, p.InstrumentModuleID, "body.instrument_module_id"); err != nil {
		return err
	}
	missing, err := s.missingExecutions(ctx, []string{p.ExecutedObsUnitID})
	if err != nil {
		return err
	}
	if missing[p.ExecutedObsUnitID] {
		return problem.Field("body.executed_obs_unit_id", "no such executed obs unit", p.ExecutedObsUnitID)
	}
	id := ""
	if clientID {
		id = p.ID
	}
	rows, err := s.Store.PackagesByIDOrName(ctx, id, p.ExecutedObsUnitID, p.Name)
	if err != nil {
		return dbErr(err)
	}
	for _, row := range rows {
		switch {
		case row.Package.ID != p.ID:
			return &NameConflictError{Execution: p.ExecutedObsUnitID, Name: p.Name, ExistingID: row.Package.ID}
		case row.Package.ExecutedObsUnitID != p.ExecutedObsUnitID || row.Package.InstrumentModuleID != p.InstrumentModuleID || row.Package.Name != p.Name:
			return conflict("body.id: raw data package " + p.ID + " already exists with other content; choose a new id")
		case row.Package.Status == PackageComplete && !subset(p.FileIDs, row.FileIDs):
			return conflict("body.id: raw data package " + p.ID + " is complete with other files; no file can join it")
		}
	}
	return s.checkPackageFiles(ctx, p.ID, p.ExecutedObsUnitID, p.InstrumentModuleID, p.FileIDs)
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// NameConflictError is a package named as another package of its execution (409, rule 1).
type NameConflictError struct {
	Execution, Name, ExistingID string
}

func (e *NameConflictError) Error() string {
	return "body.name: execution " + e.Execution + " already has a package named " + strconv.Quote(e.Name) + ": " + e.ExistingID +
		" (a package name is unique within its execution)"
}

// ProblemKind makes it a 409 (problem.Kinded).
func (e *NameConflictError) ProblemKind() problem.Kind { return problem.Conflict }

// checkPackageFiles checks the files a package (id, of execution eou and module) names at
// creation or finalize (body.file_ids): each is registered, committed or buffered (422), of the
// package's execution and module (422), and in no other package (409 listing them). Buffered
// records are read in one Redis call, the others in one query.
func (s *Service) checkPackageFiles(ctx context.Context, id, eou string, module int64, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	cached, err := s.Buffer.Get(ctx, KindFile, ids...)
	if err != nil {
		return err
	}
	// Every id is asked of the database too (one query either way): a file both committed and
	// still cached (just applied; at a secondary site until replicated) has its committed
	// membership, which a package may have written, the record does not show.
	files, err := s.Store.Files(ctx, ids)
	if err != nil {
		return dbErr(err)
	}
	for f, c := range cached {
		var r CacheRecord[File]
		if _, committed := files[f]; !committed && json.Unmarshal(c.Record, &r) == nil {
			files[f] = r.R.Record(r.At)
		}
	}
	var ve ValidationError
	taken := map[string]string{}
	for i, f := range ids {
		loc := "body.file_ids[" + strconv.Itoa(i) + "]"
		r, ok := files[f]
		switch {
		case !ok:
			ve = append(ve, problem.FieldError{Location: loc, Message: "no such raw data file", Value: f})
		case r.ExecutedObsUnitID != eou || r.InstrumentModuleID != module:
			ve = append(ve, problem.FieldError{Location: loc, Message: "a package's files are of its execution and instrument module: this file's are " +
				r.ExecutedObsUnitID + " and " + strconv.FormatInt(r.InstrumentModuleID, 10), Value: f})
		case r.RawDataPackageID != nil && *r.RawDataPackageID != id:
			taken[f] = *r.RawDataPackageID
		}
	}
	if len(ve) > 0 {
		return ve
	}
	if len(taken) > 0 {
		return &MembershipConflictError{Loc: "body.file_ids", Files: taken}
	}
	return nil
}

// checkStartConflict refuses a start under an id whose committed start differs.
func (s *Service) checkStartConflict(ctx context.Context, st Start) error {
	e, _, err := s.Store.ExecutedObsUnit(ctx, st.ID)
	if err != nil {
		return dbErr(err)
	}
	if e == nil || e.ObsUnitID == nil {
		return nil
	}
	var module int64
	if e.InstrumentModuleID != nil {
		module = *e.InstrumentModuleID
	}
	if *e.ObsUnitID != st.ObsUnitID || module != st.InstrumentModuleID || e.Site != st.Site || e.StartTime == nil || !e.StartTime.Equal(st.StartTime) {
		return conflict("body.id: executed obs unit " + st.ID + " was already started with other content; choose a new id")
	}
	return nil
}

// checkFinish finds the execution a finish is for (404 if none), refuses it unless may allows
// its instrument module (known from the same lookup: the buffered start, else the committed
// row) and refuses a finish that differs from one already committed. It returns the planned obs
// unit when known.
func (s *Service) checkFinish(ctx context.Context, id string, f Finish, may ModuleCheck) (int64, error) {
	cached, err := s.Buffer.Get(ctx, KindStart, id)
	if err != nil {
		return 0, err
	}
	var obsUnit, module int64
	var started *time.Time
	if c, ok := cached[id]; ok {
		var r CacheRecord[Start]
		_ = json.Unmarshal(c.Record, &r)
		obsUnit, module, started = r.R.ObsUnitID, r.R.InstrumentModuleID, &r.R.StartTime
	}
	e, finished, err := s.Store.ExecutedObsUnit(ctx, id)
	if err != nil {
		if obsUnit != 0 {
			// started in the buffer; a committed finish cannot exist yet... unless applied: the worker keeps the first
			if err := may(module); err != nil {
				return 0, err
			}
			return obsUnit, endsAfterStart(f, started)
		}
		return 0, dbErr(err)
	}
	if e == nil && obsUnit == 0 {
		return 0, notFound("no executed obs unit " + id)
	}
	if e != nil && e.InstrumentModuleID != nil {
		module = *e.InstrumentModuleID
	}
	if err := may(module); err != nil {
		return 0, err
	}
	if e != nil {
		if e.ObsUnitID != nil {
			obsUnit = *e.ObsUnitID
		}
		if e.StartTime != nil {
			started = e.StartTime
		}
		if finished && (e.Status != f.Status || e.EndTime == nil || !e.EndTime.Equal(f.EndTime)) {
			return 0, conflict("this execution was already finished with another end_time or status")
		}
	}
	return obsUnit, endsAfterStart(f, started)
}

// endsAfterStart refuses a finish whose end_time is before its execution's start_time (when the
// start is known: committed, or still in the buffer — a finish is acknowledged only after its
// start). The database holds the same rule (executed_obs_units_ends_after_start, migration
// 00017), so no contradiction is stored; checking it here answers the instrument at once instead
// of dead-lettering its acknowledged finish later.
func endsAfterStart(f Finish, started *time.Time) error {
	if started != nil && f.EndTime.Before(*started) {
		return problem.Field("body.end_time", "must not be before the execution's start_time "+started.UTC().Format(time.RFC3339Nano),
			f.EndTime.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
