package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
)

// The smart reads (records merged from the database and the read cache), the two direct writes
// (file update, finalize) and receipts.

// maxMerged bounds how many committed rows one smart query merges (executions of one obs unit,
// files of one package: both far below it in practice).
const maxMerged = 20000

// Page is a page of a list, paginated with limit and offset (docs/api.md).
type Page[T any] struct {
	Items  []T `json:"items"`
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

func paginate[T any](all []T, limit, offset int) Page[T] {
	p := Page[T]{Total: len(all), Limit: limit, Offset: offset, Items: []T{}}
	if offset < len(all) {
		p.Items = all[offset:min(offset+limit, len(all))]
	}
	return p
}

func startRecord(s Start) ExecutedObsUnit {
	ou, t := s.ObsUnitID, s.StartTime
	e := ExecutedObsUnit{ID: s.ID, ObsUnitID: &ou, Site: s.Site, Status: StatusRunning, StartTime: &t, Meta: s.Meta, BufferStatus: Buffered}
	if s.InstrumentModuleID != 0 {
		m := s.InstrumentModuleID
		e.InstrumentModuleID = &m
	}
	return e
}

// cachedStatus sets the buffer_status of records with parts still in the read cache (txOf: record
// id → the transactions of its cached parts): dead, with the dead letter's error, when any part's
// write is a dead letter (reads never contradict receipts); buffered while any part waits for the
// worker; committed once every part is in the main database (at a secondary site the cache keeps
// them until the replica has them). A record never reads more advanced than its least advanced
// part.
func (s *Service) cachedStatus(ctx context.Context, txOf map[string][]string, set func(id, status string, lastError *string)) error {
	if len(txOf) == 0 {
		return nil
	}
	var txs []string
	for _, ts := range txOf {
		txs = append(txs, ts...)
	}
	states, err := s.Buffer.TxStates(ctx, txs...)
	if err != nil {
		return err
	}
	for id, ts := range txOf {
		status, lastErr := partsStatus(states, ts)
		set(id, status, lastErr)
	}
	return nil
}

// partsStatus is the buffer_status of a record made of the writes txs (see cachedStatus).
func partsStatus(states map[string]TxState, txs []string) (string, *string) {
	status := Committed
	for _, tx := range txs {
		st := states[tx]
		switch {
		case st.Dead:
			msg := st.LastError
			return Dead, &msg
		case !st.Committed:
			status = Buffered
		}
	}
	return status, nil
}

// ListExecutions merges the committed executions of an obs unit with the buffered ones. Each
// record is read from the buffer before the database: a record leaves the buffer only after its
// commit, so it is always found in one of the two.
func (s *Service) ListExecutions(ctx context.Context, obsUnitID int64, limit, offset int) (Page[ExecutedObsUnit], error) {
	members, err := s.Buffer.Members(ctx, s.Buffer.OUIndex(obsUnitID))
	if err != nil {
		return Page[ExecutedObsUnit]{}, s.readErr(err)
	}
	starts, err := s.Buffer.Get(ctx, KindStart, members...)
	if err != nil {
		return Page[ExecutedObsUnit]{}, s.readErr(err)
	}
	if len(starts) == 0 {
		ok, err := s.obsUnitExists(ctx, obsUnitID)
		if err != nil {
			return Page[ExecutedObsUnit]{}, s.readErr(err)
		}
		if !ok {
			return Page[ExecutedObsUnit]{}, notFound("no obs unit " + strconv.FormatInt(obsUnitID, 10))
		}
	}
	rows, finished, err := s.Store.ExecutionsOf(ctx, obsUnitID, maxMerged)
	if err != nil {
		return Page[ExecutedObsUnit]{}, s.readErr(err)
	}
	byID := make(map[string]int, len(rows))
	for i, r := range rows {
		byID[r.ID] = i
	}
	txOf := map[string][]string{} // cached parts of a row (start, finish) → their transactions
	for id, c := range starts {
		if _, ok := byID[id]; ok {
			continue
		}
		var r CacheRecord[Start]
		if json.Unmarshal(c.Record, &r) == nil {
			byID[id] = len(rows)
			rows = append(rows, startRecord(r.R))
			txOf[id] = append(txOf[id], c.Tx)
		}
	}
	var open []string
	for _, r := range rows {
		if !finished[r.ID] {
			open = append(open, r.ID)
		}
	}
	fins, err := s.Buffer.Get(ctx, KindFinish, open...)
	if err != nil {
		return Page[ExecutedObsUnit]{}, s.readErr(err)
	}
	var unresolved []string // open, and no finish in the buffer
	for _, id := range open {
		c, ok := fins[id]
		var f CacheRecord[Finish]
		if !ok || json.Unmarshal(c.Record, &f) != nil {
			unresolved = append(unresolved, id)
			continue
		}
		r := &rows[byID[id]]
		end := f.R.EndTime
		r.Status, r.EndTime, r.Meta = f.R.Status, &end, MergeMeta(r.Meta, f.R.Meta)
		txOf[id] = append(txOf[id], c.Tx)
	}
	// The finishes were read from the buffer after the executions from the database: a finish
	// committed and evicted in between is in neither. Those executions are read again, now
	// after the buffer, so a finish is found in one of the two (a read never goes backwards).
	if len(unresolved) > 0 {
		finished, err := s.Store.FinishedExecutions(ctx, unresolved)
		if err != nil {
			return Page[ExecutedObsUnit]{}, s.readErr(err)
		}
		for id, r := range finished {
			rows[byID[id]] = r
			delete(txOf, id)
		}
	}
	if err := s.cachedStatus(ctx, txOf, func(id, status string, lastErr *string) {
		rows[byID[id]].BufferStatus, rows[byID[id]].LastError = status, lastErr
	}); err != nil {
		return Page[ExecutedObsUnit]{}, s.readErr(err)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i].StartTime, rows[j].StartTime
		switch {
		case a == nil || b == nil:
			return a != nil
		case !a.Equal(*b):
			return a.After(*b)
		}
		return rows[i].ID > rows[j].ID
	})
	return paginate(rows, limit, offset), nil
}

// File reads a raw data file: its row or, while its registration is buffered, its cache entry.
func (s *Service) File(ctx context.Context, rawID string) (RawDataFile, error) {
	id, ok := ParseUUID(rawID)
	if !ok {
		return RawDataFile{}, problem.Field("path.id", "must be a UUID", rawID)
	}
	cached, err := s.Buffer.Get(ctx, KindFile, id)
	if err != nil {
		return RawDataFile{}, s.readErr(err)
	}
	f, err := s.Store.File(ctx, id)
	if err != nil {
		return RawDataFile{}, s.readErr(err)
	}
	if f != nil {
		return *f, nil
	}
	if c, ok := cached[id]; ok {
		var r CacheRecord[File]
		if err := json.Unmarshal(c.Record, &r); err == nil {
			rec := r.R.Record(r.At)
			// At a secondary site a committed record stays cached until the replica has it; a
			// dead letter's record reads dead.
			states, err := s.Buffer.TxStates(ctx, c.Tx)
			if err != nil {
				return RawDataFile{}, s.readErr(err)
			}
			rec.BufferStatus, rec.LastError = partsStatus(states, []string{c.Tx})
			return rec, nil
		}
	}
	return RawDataFile{}, notFound("no raw data file " + id)
}

// PackageView is a package with a page of its files.
type PackageView struct {
	RawDataPackage
	Files Page[RawDataFile] `json:"files"`
}

// Package reads a package and a page of its files, merged from the database and the buffer.
func (s *Service) Package(ctx context.Context, rawID string, limit, offset int) (PackageView, error) {
	id, ok := ParseUUID(rawID)
	if !ok {
		return PackageView{}, problem.Field("path.id", "must be a UUID", rawID)
	}
	cachedPkg, err := s.Buffer.Get(ctx, KindPackage, id)
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	members, err := s.Buffer.Members(ctx, s.Buffer.PackageIndex(id))
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	var view PackageView
	var named []string // files the package names
	row, err := s.Store.Package(ctx, id)
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	txOf := map[string][]string{}
	switch {
	case row != nil:
		view.RawDataPackage, named = row.Package, row.FileIDs
	default:
		c, ok := cachedPkg[id]
		var r CacheRecord[Package]
		if !ok || json.Unmarshal(c.Record, &r) != nil {
			return PackageView{}, notFound("no raw data package " + id)
		}
		p := r.R
		view.RawDataPackage = RawDataPackage{ID: p.ID, ExecutedObsUnitID: p.ExecutedObsUnitID, InstrumentModuleID: p.InstrumentModuleID,
			Name: p.Name, Status: PackageBuilding, CreatedAt: r.At, BufferStatus: Buffered}
		named = p.FileIDs
		txOf[id] = []string{c.Tx}
	}
	bufferedFiles, err := s.Buffer.Get(ctx, KindFile, append(members, named...)...)
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	files, err := s.Store.PackageFiles(ctx, id, maxMerged)
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	inDB := make(map[string]bool, len(files))
	for _, f := range files {
		inDB[f.ID] = true
	}
	// Files the package names that are committed while the package itself is still cached (the
	// database cannot link them to a package it does not hold yet), cached or not: as in getFile,
	// the row wins over a cached registration (a client's retry of a committed file is held again).
	var namedCommitted []string
	for _, fid := range named {
		if !inDB[fid] {
			namedCommitted = append(namedCommitted, fid)
		}
	}
	if len(namedCommitted) > 0 {
		found, err := s.Store.Files(ctx, namedCommitted)
		if err != nil {
			return PackageView{}, s.readErr(err)
		}
		for _, f := range found {
			if f.RawDataPackageID == nil {
				p := id
				f.RawDataPackageID = &p
			}
			files, inDB[f.ID] = append(files, f), true
		}
	}
	byID := map[string]int{}
	for fid, c := range bufferedFiles {
		if inDB[fid] {
			continue
		}
		var r CacheRecord[File]
		if json.Unmarshal(c.Record, &r) != nil {
			continue
		}
		rec := r.R.Record(r.At)
		if rec.RawDataPackageID == nil {
			p := id
			rec.RawDataPackageID = &p
		}
		if *rec.RawDataPackageID == id {
			byID[fid] = len(files)
			files = append(files, rec)
			txOf[fid] = []string{c.Tx}
		}
	}
	err = s.cachedStatus(ctx, txOf, func(rid, status string, lastErr *string) {
		if rid == id && row == nil {
			view.BufferStatus, view.LastError = status, lastErr
		} else if i, ok := byID[rid]; ok {
			files[i].BufferStatus, files[i].LastError = status, lastErr
		}
	})
	if err != nil {
		return PackageView{}, s.readErr(err)
	}
	SortFiles(files)
	view.Files = paginate(files, limit, offset)
	return view, nil
}

// checkJoin checks that file id may join package pkg (PUT /raw_data_files/{id} naming a
// package, rule 1): the package exists (422) and is of the file's execution and module (422);
// that the file is in no other package is held by the database when it is written (409, see
// Store.UpdateFile).
func (s *Service) checkJoin(ctx context.Context, id, pkg string, pending *FilesTask) error {
	infos, err := s.packageInfos(ctx, []string{pkg})
	if err != nil {
		return s.writeErr(err)
	}
	in, ok := infos[pkg]
	if !ok {
		return problem.Field("body.raw_data_package_id", "no such raw data package", pkg)
	}
	var eou string
	var module int64
	if pending != nil {
		eou, module = pending.Files[0].ExecutedObsUnitID, pending.Files[0].InstrumentModuleID
	} else {
		f, err := s.Store.File(ctx, id)
		if err != nil {
			return s.readErr(err)
		}
		if f == nil {
			return notFound("no raw data file " + id)
		}
		eou, module = f.ExecutedObsUnitID, f.InstrumentModuleID
	}
	if in.ExecutedObsUnitID != eou || in.InstrumentModuleID != module {
		return problem.Field("body.raw_data_package_id", "a package's files are of its execution and instrument module: this package's are "+
			in.ExecutedObsUnitID+" and "+strconv.FormatInt(in.InstrumentModuleID, 10)+", the file's "+eou+" and "+strconv.FormatInt(module, 10), pkg)
	}
	return s.checkClaimed(ctx, pkg, []string{id}, "body.raw_data_package_id")
}

// checkClaimed refuses (409 listing them) files a buffered write reserved for another package
// than pkg (their ClaimMember claims): a direct write (file update, finalize) must not take a
// file a package still in the buffer has been promised. Committed memberships are the
// database's to refuse.
func (s *Service) checkClaimed(ctx context.Context, pkg string, files []string, loc string) error {
	keys := make([]string, len(files))
	for i, f := range files {
		keys[i] = ClaimMember + f
	}
	owners, err := s.Buffer.ClaimOwners(ctx, keys...)
	if err != nil {
		return s.readErr(err)
	}
	taken := map[string]string{}
	for i, f := range files {
		if o, ok := owners[keys[i]]; ok && o != pkg {
			taken[f] = o
		}
	}
	if len(taken) > 0 {
		return &MembershipConflictError{Loc: loc, Files: taken}
	}
	return nil
}

// UpdateFile changes a registered file in the database (not buffered; a registration still
// buffered is applied first).
func (s *Service) UpdateFile(ctx context.Context, caller Caller, rawID string, body []byte) (RawDataFile, error) {
	id, ok := ParseUUID(rawID)
	if !ok {
		return RawDataFile{}, problem.Field("path.id", "must be a UUID", rawID)
	}
	u, err := DecodeFileUpdate(body)
	if err != nil {
		return RawDataFile{}, err
	}
	cached, err := s.Buffer.Get(ctx, KindFile, id)
	if err != nil {
		return RawDataFile{}, s.readErr(err)
	}
	var pending *FilesTask
	if c, ok := cached[id]; ok {
		var r CacheRecord[File]
		if json.Unmarshal(c.Record, &r) == nil {
			pending = &FilesTask{Envelope: Envelope{TxID: c.Tx, AcceptedAt: r.At}, Files: []File{r.R}}
		}
	}
	may := caller.check("path.id")
	if pending != nil {
		if err := may(pending.Files[0].InstrumentModuleID); err != nil {
			return RawDataFile{}, err
		}
	}
	if u.RawDataPackageID != nil {
		if err := s.checkJoin(ctx, id, *u.RawDataPackageID, pending); err != nil {
			return RawDataFile{}, err
		}
	}
	f, err := s.Store.UpdateFile(ctx, id, u, pending, may)
	var ce *ConflictError
	var oe *OwnershipError
	switch {
	case errors.Is(err, problem.ErrNotFound):
		return RawDataFile{}, notFound("no raw data file " + id)
	case errors.As(err, &ce):
		return RawDataFile{}, ce
	case errors.As(err, &oe):
		return RawDataFile{}, oe
	case err != nil:
		return RawDataFile{}, s.readErr(err)
	}
	return *f, nil
}

// Finalize makes a package complete (not buffered; a create still buffered is applied first).
func (s *Service) Finalize(ctx context.Context, caller Caller, rawID string, body []byte) (RawDataPackage, error) {
	id, ok := ParseUUID(rawID)
	if !ok {
		return RawDataPackage{}, problem.Field("path.id", "must be a UUID", rawID)
	}
	fin, err := DecodeFinalize(body)
	if err != nil {
		return RawDataPackage{}, err
	}
	cached, err := s.Buffer.Get(ctx, KindPackage, id)
	if err != nil {
		return RawDataPackage{}, s.readErr(err)
	}
	var pending *PackageTask
	if c, ok := cached[id]; ok {
		var r CacheRecord[Package]
		if json.Unmarshal(c.Record, &r) == nil {
			pending = &PackageTask{Envelope: Envelope{TxID: c.Tx, AcceptedAt: r.At}, Package: r.R}
		}
	}
	may := caller.check("path.id")
	if pending != nil {
		if err := may(pending.Package.InstrumentModuleID); err != nil {
			return RawDataPackage{}, err
		}
	}
	if len(fin.FileIDs) > 0 {
		var eou string
		var module int64
		if pending != nil {
			eou, module = pending.Package.ExecutedObsUnitID, pending.Package.InstrumentModuleID
		} else {
			row, err := s.Store.Package(ctx, id)
			if err != nil {
				return RawDataPackage{}, s.readErr(err)
			}
			if row == nil {
				return RawDataPackage{}, notFound("no raw data package " + id)
			}
			eou, module = row.Package.ExecutedObsUnitID, row.Package.InstrumentModuleID
			if err := may(module); err != nil {
				return RawDataPackage{}, err
			}
		}
		if err := s.checkPackageFiles(ctx, id, eou, module, fin.FileIDs); err != nil {
			return RawDataPackage{}, s.writeErr(err)
		}
		if err := s.checkClaimed(ctx, id, fin.FileIDs, "body.file_ids"); err != nil {
			return RawDataPackage{}, err
		}
	}
	row, _, err := s.Store.Finalize(ctx, id, fin, pending, may)
	var ce *ConflictError
	var oe *OwnershipError
	switch {
	case errors.Is(err, problem.ErrNotFound):
		return RawDataPackage{}, notFound("no raw data package " + id)
	case errors.As(err, &ce):
		return RawDataPackage{}, ce
	case errors.As(err, &oe):
		return RawDataPackage{}, oe
	case err != nil:
		return RawDataPackage{}, s.readErr(err)
	}
	return row.Package, nil
}

// Receipt answers where a buffered write is. The access table admits any user or any API token;
// a token must carry read:data or read:observations (either one: the table's rules require all
// their scopes, so the check is here).
func (s *Service) Receipt(ctx context.Context, caller Caller, rawTx string) (Receipt, error) {
	if caller.APIToken && !authn.ScopeGranted(caller.Scopes, "read:data") && !authn.ScopeGranted(caller.Scopes, "read:observations") {
		return Receipt{}, problem.InsufficientScope.New("API token lacks scope read:data or read:observations (either one)")
	}
	tx, ok := ParseUUID(rawTx)
	if !ok {
		return Receipt{}, problem.Field("path.transaction_id", "must be a UUID", rawTx)
	}
	r, err := s.Buffer.Receipt(ctx, tx)
	switch {
	case errors.Is(err, ErrNoTransaction):
		return Receipt{}, err
	case err != nil:
		return Receipt{}, s.readErr(err)
	}
	return r, nil
}
