package httpapi

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// knownIDs is a bounded set of references seen to exist. Obs units and executed obs units are
// never deleted while executions or files reference them (foreign key, or by design), so a
// positive answer can be reused; the set is cleared when full.
type knownIDs struct {
	mu  sync.Mutex
	max int
	m   map[string]struct{}
}

func newKnownIDs(max int) *knownIDs { return &knownIDs{max: max, m: map[string]struct{}{}} }

func (k *knownIDs) has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[id]
	return ok
}

func (k *knownIDs) add(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= k.max {
		clear(k.m)
	}
	k.m[id] = struct{}{}
}

// checkObsUnit refuses (422 at loc) an obs unit that does not exist.
func (h *Handlers) checkObsUnit(ctx context.Context, id int64, loc string) error {
	ok, err := h.obsUnitExists(ctx, id)
	if err == nil && !ok {
		return fieldError(loc, "no such obs unit", id)
	}
	return err
}

// obsUnitExists reports whether a planned obs unit exists (remembered once seen).
func (h *Handlers) obsUnitExists(ctx context.Context, id int64) (bool, error) {
	key := "ou:" + strconv.FormatInt(id, 10)
	if h.known.has(key) {
		return true, nil
	}
	ok, err := h.Store.ObsUnitExists(ctx, id)
	if err != nil {
		return false, dbErr(err)
	}
	if ok {
		h.known.add(key)
	}
	return ok, nil
}

func (h *Handlers) checkModule(ctx context.Context, id int64, loc string) error {
	ok, err := h.Store.ModuleExists(ctx, id)
	if err != nil {
		return dbErr(err)
	}
	if !ok {
		return fieldError(loc, "no such instrument module", id)
	}
	return nil
}

// missingExecutions returns which executed obs units exist neither in the buffer nor in the
// database.
func (h *Handlers) missingExecutions(ctx context.Context, ids []string) (map[string]bool, error) {
	var ask []string
	for _, id := range ids {
		if !h.known.has("eou:" + id) {
			ask = append(ask, id)
		}
	}
	missing := map[string]bool{}
	if len(ask) == 0 {
		return missing, nil
	}
	inBuffer, err := h.Buffer.Exists(ctx, buffer.KindStart, ask...)
	if err != nil {
		return nil, err
	}
	var inDB []string
	for _, id := range ask {
		if inBuffer[id] {
			h.known.add("eou:" + id)
		} else {
			inDB = append(inDB, id)
		}
	}
	found, err := h.Store.ExistingIDs(ctx, "executed_obs_units", inDB)
	if err != nil {
		return nil, dbErr(err)
	}
	for _, id := range inDB {
		if found[id] {
			h.known.add("eou:" + id)
		} else {
			missing[id] = true
		}
	}
	return missing, nil
}

// missingRecords returns which ids of kind (files, packages) exist neither in the buffer nor in
// table.
func (h *Handlers) missingRecords(ctx context.Context, kind, table string, ids []string) (map[string]bool, error) {
	missing := map[string]bool{}
	if len(ids) == 0 {
		return missing, nil
	}
	inBuffer, err := h.Buffer.Exists(ctx, kind, ids...)
	if err != nil {
		return nil, err
	}
	var ask []string
	for _, id := range ids {
		if !inBuffer[id] {
			ask = append(ask, id)
		}
	}
	found, err := h.Store.ExistingIDs(ctx, table, ask)
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
func (h *Handlers) checkFiles(ctx context.Context, files []ingest.File, prefix func(int) string) error {
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
		if err := h.checkModule(ctx, m, prefix(first["m"+strconv.FormatInt(m, 10)])+".instrument_module_id"); err != nil {
			return err
		}
	}
	missing, err := h.missingExecutions(ctx, eous)
	if err != nil {
		return err
	}
	var ve ingest.ValidationError
	for _, e := range eous {
		if missing[e] {
			ve = append(ve, ingest.FieldError{Location: prefix(first["e"+e]) + ".executed_obs_unit_id", Message: "no such executed obs unit", Value: e})
		}
	}
	// Packages: one query for existence and completeness; the buffer for those not committed yet.
	statuses, err := h.Store.PackageStatuses(ctx, pkgs)
	if err != nil {
		return dbErr(err)
	}
	var uncommitted []string
	for _, p := range pkgs {
		if _, ok := statuses[p]; !ok {
			uncommitted = append(uncommitted, p)
		}
	}
	inBuffer, err := h.Buffer.Exists(ctx, buffer.KindPackage, uncommitted...)
	if err != nil {
		return err
	}
	for _, p := range uncommitted {
		if !inBuffer[p] {
			ve = append(ve, ingest.FieldError{Location: prefix(first["p"+p]) + ".raw_data_package_id", Message: "no such raw data package", Value: p})
		}
	}
	if len(ve) > 0 {
		return ve
	}
	for _, p := range pkgs {
		if statuses[p] == ingest.PackageComplete {
			return huma.Error409Conflict(prefix(first["p"+p]) + ".raw_data_package_id: raw data package " + p + " is complete; no file can join it")
		}
	}
	if len(clientIDs) == 0 {
		return nil
	}
	existing, err := h.Store.Files(ctx, clientIDs)
	if err != nil {
		return dbErr(err)
	}
	for i, f := range files {
		if r, ok := existing[f.ID]; ok && !sameFile(f, r) {
			return huma.Error409Conflict(prefix(i) + ".id: file " + f.ID + " is already registered with other content; choose a new id")
		}
	}
	return nil
}

// sameFile reports whether a registration repeats a registered file.
func sameFile(f ingest.File, r ingest.RawDataFile) bool {
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
func (h *Handlers) checkPackage(ctx context.Context, p ingest.Package) error {
	if err := h.checkModule(ctx, p.InstrumentModuleID, "body.instrument_module_id"); err != nil {
		return err
	}
	missing, err := h.missingExecutions(ctx, []string{p.ExecutedObsUnitID})
	if err != nil {
		return err
	}
	if missing[p.ExecutedObsUnitID] {
		return fieldError("body.executed_obs_unit_id", "no such executed obs unit", p.ExecutedObsUnitID)
	}
	if err := h.checkFileIDs(ctx, p.FileIDs); err != nil {
		return err
	}
	if p.ID == "" {
		return nil
	}
	row, err := h.Store.Package(ctx, p.ID)
	if err != nil {
		return dbErr(err)
	}
	if row != nil {
		a, b := slices.Clone(p.FileIDs), slices.Clone(row.FileIDs)
		slices.Sort(a)
		slices.Sort(b)
		if row.Package.ExecutedObsUnitID != p.ExecutedObsUnitID || row.Package.InstrumentModuleID != p.InstrumentModuleID ||
			row.Package.Name != p.Name || (row.Package.Status == ingest.PackageBuilding && !slices.Equal(a, b)) {
			return huma.Error409Conflict("body.id: raw data package " + p.ID + " already exists with other content; choose a new id")
		}
	}
	return nil
}

// checkFileIDs checks that every listed file is registered (buffered or committed).
func (h *Handlers) checkFileIDs(ctx context.Context, ids []string) error {
	missing, err := h.missingRecords(ctx, buffer.KindFile, "raw_data_files", ids)
	if err != nil {
		return err
	}
	var ve ingest.ValidationError
	for i, id := range ids {
		if missing[id] {
			ve = append(ve, ingest.FieldError{Location: "body.file_ids[" + strconv.Itoa(i) + "]", Message: "no such raw data file", Value: id})
		}
	}
	if len(ve) > 0 {
		return ve
	}
	return nil
}

// checkStartConflict refuses a start under an id whose committed start differs.
func (h *Handlers) checkStartConflict(ctx context.Context, s ingest.Start) error {
	e, _, err := h.Store.ExecutedObsUnit(ctx, s.ID)
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
	if *e.ObsUnitID != s.ObsUnitID || module != s.InstrumentModuleID || e.Site != s.Site || e.StartTime == nil || !e.StartTime.Equal(s.StartTime) {
		return huma.Error409Conflict("body.id: executed obs unit " + s.ID + " was already started with other content; choose a new id")
	}
	return nil
}

// checkFinish finds the execution a finish is for (404 if none) and refuses a finish that
// differs from one already committed. It returns the planned obs unit when known.
func (h *Handlers) checkFinish(ctx context.Context, id string, f ingest.Finish) (int64, error) {
	cached, err := h.Buffer.Get(ctx, buffer.KindStart, id)
	if err != nil {
		return 0, err
	}
	var obsUnit int64
	if c, ok := cached[id]; ok {
		var r cacheRecord[ingest.Start]
		_ = json.Unmarshal(c.Record, &r)
		obsUnit = r.R.ObsUnitID
	}
	e, finished, err := h.Store.ExecutedObsUnit(ctx, id)
	if err != nil {
		if obsUnit != 0 {
			return obsUnit, nil // started in the buffer; a committed finish cannot exist yet... unless applied: the worker keeps the first
		}
		return 0, dbErr(err)
	}
	if e == nil && obsUnit == 0 {
		return 0, huma.Error404NotFound("no executed obs unit " + id)
	}
	if e != nil {
		if e.ObsUnitID != nil {
			obsUnit = *e.ObsUnitID
		}
		if finished && (e.Status != f.Status || e.EndTime == nil || !e.EndTime.Equal(f.EndTime)) {
			return 0, huma.Error409Conflict("this execution was already finished with another end_time or status")
		}
	}
	return obsUnit, nil
}
