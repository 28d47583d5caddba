package ingest

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/obsops/obsops/pkg/problem"
)

// The reference rules of the buffered writes: every referenced record exists (in the buffer or
// the database), no file joins a complete package, and a client-chosen id is not registered with
// other content.

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

// missingRecords returns which ids of kind (files, packages) exist neither in the buffer nor in
// table.
func (s *Service) missingRecords(ctx context.Context, kind, table string, ids []string) (map[string]bool, error) {
	missing := map[string]bool{}
	if len(ids) == 0 {
		return missing, nil
	}
	inBuffer, err := s.Buffer.Exists(ctx, kind, ids...)
	if err != nil {
		return nil, err
	}
	var ask []string
	for _, id := range ids {
		if !inBuffer[id] {
			ask = append(ask, id)
		}
	}
	found, err := s.Store.ExistingIDs(ctx, table, ask)
	if err != nil {
		return nil, dbErr(err)
	}
	for _, id := range ask {
		if !found[id] {
			missing[id] = true
		}
	}
	return missing, nil
}

// checkFiles validates the references of files (one or a bulk): modules, executed obs units and
// packages exist, no package is complete, and no client-chosen id is registered with other
// content. prefix(i) is the location of file i ("body" or "body.files[i]").
func (s *Service) checkFiles(ctx context.Context, files []File, prefix func(int) string) error {
	first := map[string]int{} // first file using each reference
	var modules []int64
	var eous, pkgs, clientIDs []string
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
		if f.ID != "" {
			clientIDs = append(clientIDs, f.ID)
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
	// Packages: one query for existence and completeness; the buffer for those not committed yet.
	statuses, err := s.Store.PackageStatuses(ctx, pkgs)
	if err != nil {
		return dbErr(err)
	}
	var uncommitted []string
	for _, p := range pkgs {
		if _, ok := statuses[p]; !ok {
			uncommitted = append(uncommitted, p)
		}
	}
	inBuffer, err := s.Buffer.Exists(ctx, KindPackage, uncommitted...)
	if err != nil {
		return err
	}
	for _, p := range uncommitted {
		if !inBuffer[p] {
			ve = append(ve, problem.FieldError{Location: prefix(first["p"+p]) + ".raw_data_package_id", Message: "no such raw data package", Value: p})
		}
	}
	if len(ve) > 0 {
		return ve
	}
	for _, p := range pkgs {
		if statuses[p] == PackageComplete {
			return conflict(prefix(first["p"+p]) + ".raw_data_package_id: raw data package " + p + " is complete; no file can join it")
		}
	}
	if len(clientIDs) == 0 {
		return nil
	}
	existing, err := s.Store.Files(ctx, clientIDs)
	if err != nil {
		return dbErr(err)
	}
	for i, f := range files {
		if r, ok := existing[f.ID]; ok && !sameFile(f, r) {
			return conflict(prefix(i) + ".id: file " + f.ID + " is already registered with other content; choose a new id")
		}
	}
	return nil
}

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

// checkPackage validates a package creation's references and a client-chosen id.
func (s *Service) checkPackage(ctx context.Context, p Package) error {
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
	if err := s.checkFileIDs(ctx, p.FileIDs); err != nil {
		return err
	}
	if p.ID == "" {
		return nil
	}
	row, err := s.Store.Package(ctx, p.ID)
	if err != nil {
		return dbErr(err)
	}
	if row != nil {
		a, b := slices.Clone(p.FileIDs), slices.Clone(row.FileIDs)
		slices.Sort(a)
		slices.Sort(b)
		if row.Package.ExecutedObsUnitID != p.ExecutedObsUnitID || row.Package.InstrumentModuleID != p.InstrumentModuleID ||
			row.Package.Name != p.Name || (row.Package.Status == PackageBuilding && !slices.Equal(a, b)) {
			return conflict("body.id: raw data package " + p.ID + " already exists with other content; choose a new id")
		}
	}
	return nil
}

// checkFileIDs checks that every listed file is registered (buffered or committed).
func (s *Service) checkFileIDs(ctx context.Context, ids []string) error {
	missing, err := s.missingRecords(ctx, KindFile, "raw_data_files", ids)
	if err != nil {
		return err
	}
	var ve ValidationError
	for i, id := range ids {
		if missing[id] {
			ve = append(ve, problem.FieldError{Location: "body.file_ids[" + strconv.Itoa(i) + "]", Message: "no such raw data file", Value: id})
		}
	}
	if len(ve) > 0 {
		return ve
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

// checkFinish finds the execution a finish is for (404 if none) and refuses a finish that
// differs from one already committed. It returns the planned obs unit when known.
func (s *Service) checkFinish(ctx context.Context, id string, f Finish) (int64, error) {
	cached, err := s.Buffer.Get(ctx, KindStart, id)
	if err != nil {
		return 0, err
	}
	var obsUnit int64
	var started *time.Time
	if c, ok := cached[id]; ok {
		var r CacheRecord[Start]
		_ = json.Unmarshal(c.Record, &r)
		obsUnit, started = r.R.ObsUnitID, &r.R.StartTime
	}
	e, finished, err := s.Store.ExecutedObsUnit(ctx, id)
	if err != nil {
		if obsUnit != 0 {
			// started in the buffer; a committed finish cannot exist yet... unless applied: the worker keeps the first
			return obsUnit, endsAfterStart(f, started)
		}
		return 0, dbErr(err)
	}
	if e == nil && obsUnit == 0 {
		return 0, notFound("no executed obs unit " + id)
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
