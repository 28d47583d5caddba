package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// maxMerged bounds how many committed rows one smart query merges (executions of one obs unit,
// files of one package: both far below it in practice).
const maxMerged = 20000

// Page is a page of a list (DESIGN §8).
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

type listExecutionsInput struct {
	ObsUnitID int64 `path:"obs_unit_id" minimum:"1" doc:"The planned obs unit (catalog)."`
	Limit     int   `query:"limit" default:"50" minimum:"1" maximum:"500"`
	Offset    int   `query:"offset" default:"0" minimum:"0"`
}

type listExecutionsOutput struct {
	Body Page[ingest.ExecutedObsUnit]
}

func startRecord(s ingest.Start) ingest.ExecutedObsUnit {
	ou, t := s.ObsUnitID, s.StartTime
	e := ingest.ExecutedObsUnit{ID: s.ID, ObsUnitID: &ou, Site: s.Site, Status: ingest.StatusRunning, StartTime: &t, Meta: s.Meta, BufferStatus: ingest.Buffered}
	if s.InstrumentModuleID != 0 {
		m := s.InstrumentModuleID
		e.InstrumentModuleID = &m
	}
	return e
}

func (h *Handlers) readErr(err error) error {
	if buffer.IsUnavailable(err) {
		return h.unavailable("the buffer (Redis) is unavailable")
	}
	if database.MainUnreachable(err) { // a direct write at a secondary site with its WAN down
		return database.ErrMainUnreachable
	}
	return h.unavailable("the database is unavailable")
}

// cachedStatus sets the buffer_status of records with parts still in the read cache (txOf: record
// id → the transactions of its cached parts): buffered while any part waits for the worker,
// committed once every part is in the main database (at a secondary site the cache keeps them
// until the replica has them). A record never reads more advanced than its least advanced part.
func (h *Handlers) cachedStatus(ctx context.Context, txOf map[string][]string, set func(id, status string)) error {
	if len(txOf) == 0 {
		return nil
	}
	var txs []string
	for _, ts := range txOf {
		txs = append(txs, ts...)
	}
	done, err := h.Buffer.CommittedTxs(ctx, txs...)
	if err != nil {
		return err
	}
	for id, ts := range txOf {
		status := ingest.Committed
		for _, tx := range ts {
			if !done[tx] {
				status = ingest.Buffered
			}
		}
		set(id, status)
	}
	return nil
}

// listExecutions merges the committed executions of an obs unit with the buffered ones. Each
// record is read from the buffer before the database: a record leaves the buffer only after its
// commit, so it is always found in one of the two.
func (h *Handlers) listExecutions(ctx context.Context, in *listExecutionsInput) (*listExecutionsOutput, error) {
	members, err := h.Buffer.Members(ctx, buffer.OUIndex(in.ObsUnitID))
	if err != nil {
		return nil, h.readErr(err)
	}
	starts, err := h.Buffer.Get(ctx, buffer.KindStart, members...)
	if err != nil {
		return nil, h.readErr(err)
	}
	if len(starts) == 0 {
		ok, err := h.obsUnitExists(ctx, in.ObsUnitID)
		if err != nil {
			return nil, h.readErr(err)
		}
		if !ok {
			return nil, huma.Error404NotFound("no obs unit " + strconv.FormatInt(in.ObsUnitID, 10))
		}
	}
	rows, finished, err := h.Store.ExecutionsOf(ctx, in.ObsUnitID, maxMerged)
	if err != nil {
		return nil, h.readErr(err)
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
		var r cacheRecord[ingest.Start]
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
	fins, err := h.Buffer.Get(ctx, buffer.KindFinish, open...)
	if err != nil {
		return nil, h.readErr(err)
	}
	var unresolved []string // open, and no finish in the buffer
	for _, id := range open {
		c, ok := fins[id]
		var f cacheRecord[ingest.Finish]
		if !ok || json.Unmarshal(c.Record, &f) != nil {
			unresolved = append(unresolved, id)
			continue
		}
		r := &rows[byID[id]]
		end := f.R.EndTime
		r.Status, r.EndTime, r.Meta = f.R.Status, &end, postgres.MergeMeta(r.Meta, f.R.Meta)
		txOf[id] = append(txOf[id], c.Tx)
	}
	// The finishes were read from the buffer after the executions from the database: a finish
	// committed and evicted in between is in neither. Those executions are read again, now
	// after the buffer, so a finish is found in one of the two (a read never goes backwards).
	if len(unresolved) > 0 {
		finished, err := h.Store.FinishedExecutions(ctx, unresolved)
		if err != nil {
			return nil, h.readErr(err)
		}
		for id, r := range finished {
			rows[byID[id]] = r
			delete(txOf, id)
		}
	}
	if err := h.cachedStatus(ctx, txOf, func(id, status string) { rows[byID[id]].BufferStatus = status }); err != nil {
		return nil, h.readErr(err)
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
	return &listExecutionsOutput{Body: paginate(rows, in.Limit, in.Offset)}, nil
}

type fileIDInput struct {
	ID string `path:"id" doc:"The file (UUID)."`
}

type fileOutput struct{ Body ingest.RawDataFile }

func (h *Handlers) getFile(ctx context.Context, in *fileIDInput) (*fileOutput, error) {
	id, ok := ingest.ParseUUID(in.ID)
	if !ok {
		return nil, fieldError("path.id", "must be a UUID", in.ID)
	}
	cached, err := h.Buffer.Get(ctx, buffer.KindFile, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	f, err := h.Store.File(ctx, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	if f != nil {
		return &fileOutput{Body: *f}, nil
	}
	if c, ok := cached[id]; ok {
		var r cacheRecord[ingest.File]
		if err := json.Unmarshal(c.Record, &r); err == nil {
			rec := r.R.Record(r.At)
			// At a secondary site a committed record stays cached until the replica has it.
			done, err := h.Buffer.CommittedTxs(ctx, c.Tx)
			if err != nil {
				return nil, h.readErr(err)
			}
			if done[c.Tx] {
				rec.BufferStatus = ingest.Committed
			}
			return &fileOutput{Body: rec}, nil
		}
	}
	return nil, huma.Error404NotFound("no raw data file " + id)
}

type packageInput struct {
	ID     string `path:"id" doc:"The package (UUID)."`
	Limit  int    `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Files per page."`
	Offset int    `query:"offset" default:"0" minimum:"0"`
}

// PackageView is a package with a page of its files.
type PackageView struct {
	ingest.RawDataPackage
	Files Page[ingest.RawDataFile] `json:"files"`
}

type packageOutput struct{ Body PackageView }

func (h *Handlers) getPackage(ctx context.Context, in *packageInput) (*packageOutput, error) {
	id, ok := ingest.ParseUUID(in.ID)
	if !ok {
		return nil, fieldError("path.id", "must be a UUID", in.ID)
	}
	cachedPkg, err := h.Buffer.Get(ctx, buffer.KindPackage, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	members, err := h.Buffer.Members(ctx, buffer.PackageIndex(id))
	if err != nil {
		return nil, h.readErr(err)
	}
	var view PackageView
	var named []string // files the package names
	row, err := h.Store.Package(ctx, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	txOf := map[string][]string{}
	switch {
	case row != nil:
		view.RawDataPackage, named = row.Package, row.FileIDs
	default:
		c, ok := cachedPkg[id]
		var r cacheRecord[ingest.Package]
		if !ok || json.Unmarshal(c.Record, &r) != nil {
			return nil, huma.Error404NotFound("no raw data package " + id)
		}
		p := r.R
		view.RawDataPackage = ingest.RawDataPackage{ID: p.ID, ExecutedObsUnitID: p.ExecutedObsUnitID, InstrumentModuleID: p.InstrumentModuleID,
			Name: p.Name, Status: ingest.PackageBuilding, CreatedAt: r.At, BufferStatus: ingest.Buffered}
		named = p.FileIDs
		txOf[id] = []string{c.Tx}
	}
	bufferedFiles, err := h.Buffer.Get(ctx, buffer.KindFile, append(members, named...)...)
	if err != nil {
		return nil, h.readErr(err)
	}
	files, err := h.Store.PackageFiles(ctx, id, maxMerged)
	if err != nil {
		return nil, h.readErr(err)
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
		found, err := h.Store.Files(ctx, namedCommitted)
		if err != nil {
			return nil, h.readErr(err)
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
		var r cacheRecord[ingest.File]
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
	err = h.cachedStatus(ctx, txOf, func(rid, status string) {
		if rid == id && row == nil {
			view.BufferStatus = status
		} else if i, ok := byID[rid]; ok {
			files[i].BufferStatus = status
		}
	})
	if err != nil {
		return nil, h.readErr(err)
	}
	postgres.SortFiles(files)
	view.Files = paginate(files, in.Limit, in.Offset)
	return &packageOutput{Body: view}, nil
}

type updateFileInput struct {
	ID      string `path:"id" doc:"The file (UUID)."`
	RawBody []byte `doc:"JSON body (see the schema)."`
}

func (h *Handlers) updateFile(ctx context.Context, in *updateFileInput) (*fileOutput, error) {
	id, ok := ingest.ParseUUID(in.ID)
	if !ok {
		return nil, fieldError("path.id", "must be a UUID", in.ID)
	}
	u, err := ingest.DecodeFileUpdate(in.RawBody)
	if err != nil {
		return nil, invalid(err)
	}
	if u.RawDataPackageID != nil {
		missing, err := h.missingRecords(ctx, buffer.KindPackage, "raw_data_packages", []string{*u.RawDataPackageID})
		if err != nil {
			return nil, h.mapError(err)
		}
		if missing[*u.RawDataPackageID] {
			return nil, fieldError("body.raw_data_package_id", "no such raw data package", *u.RawDataPackageID)
		}
	}
	cached, err := h.Buffer.Get(ctx, buffer.KindFile, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	var pending *ingest.FilesTask
	if c, ok := cached[id]; ok {
		var r cacheRecord[ingest.File]
		if json.Unmarshal(c.Record, &r) == nil {
			pending = &ingest.FilesTask{Envelope: ingest.Envelope{TxID: c.Tx, AcceptedAt: r.At}, Files: []ingest.File{r.R}}
		}
	}
	f, err := h.Store.UpdateFile(ctx, id, u, pending)
	var ce *postgres.ConflictError
	switch {
	case errors.Is(err, postgres.ErrNotFound):
		return nil, huma.Error404NotFound("no raw data file " + id)
	case errors.As(err, &ce):
		return nil, huma.Error409Conflict(ce.Msg)
	case err != nil:
		return nil, h.readErr(err)
	}
	return &fileOutput{Body: *f}, nil
}

type finalizeInput struct {
	ID      string `path:"id" doc:"The package (UUID)."`
	RawBody []byte `doc:"JSON body (see the schema)."`
}

type finalizeOutput struct{ Body ingest.RawDataPackage }

func (h *Handlers) finalize(ctx context.Context, in *finalizeInput) (*finalizeOutput, error) {
	id, ok := ingest.ParseUUID(in.ID)
	if !ok {
		return nil, fieldError("path.id", "must be a UUID", in.ID)
	}
	fin, err := ingest.DecodeFinalize(in.RawBody)
	if err != nil {
		return nil, invalid(err)
	}
	if err := h.checkFileIDs(ctx, fin.FileIDs); err != nil {
		return nil, h.mapError(err)
	}
	cached, err := h.Buffer.Get(ctx, buffer.KindPackage, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	var pending *ingest.PackageTask
	if c, ok := cached[id]; ok {
		var r cacheRecord[ingest.Package]
		if json.Unmarshal(c.Record, &r) == nil {
			pending = &ingest.PackageTask{Envelope: ingest.Envelope{TxID: c.Tx, AcceptedAt: r.At}, Package: r.R}
		}
	}
	row, _, err := h.Store.Finalize(ctx, id, fin, pending)
	var ce *postgres.ConflictError
	switch {
	case errors.Is(err, postgres.ErrNotFound):
		return nil, huma.Error404NotFound("no raw data package " + id)
	case errors.As(err, &ce):
		return nil, huma.Error409Conflict(ce.Msg)
	case err != nil:
		return nil, h.readErr(err)
	}
	return &finalizeOutput{Body: row.Package}, nil
}

type receiptInput struct {
	TransactionID string `path:"transaction_id" doc:"The transaction_id of a buffered write's answer."`
}

type receiptOutput struct{ Body ingest.Receipt }

// receipt answers where a buffered write is. The access table admits any user or any API token;
// a token must carry read:data or read:observations (either one: the table's rules require all
// their scopes, so the check is here).
func (h *Handlers) receipt(ctx context.Context, in *receiptInput) (*receiptOutput, error) {
	if p := authn.PrincipalFrom(ctx); p != nil && p.Method == authn.MethodAPIToken &&
		!authn.ScopeGranted(p.Scopes, "read:data") && !authn.ScopeGranted(p.Scopes, "read:observations") {
		return nil, problem.InsufficientScope.New("API token lacks scope read:data or read:observations (either one)")
	}
	tx, ok := ingest.ParseUUID(in.TransactionID)
	if !ok {
		return nil, fieldError("path.transaction_id", "must be a UUID", in.TransactionID)
	}
	r, err := h.Buffer.Receipt(ctx, tx)
	switch {
	case errors.Is(err, buffer.ErrNoTransaction):
		return nil, huma.Error404NotFound(err.Error())
	case err != nil:
		return nil, h.readErr(err)
	}
	return &receiptOutput{Body: r}, nil
}
