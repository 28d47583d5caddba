package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
)

// The buffered writes: each validated in full (body, then references), then held in the Buffer
// (or, with buffering disabled, applied at once), under the request's Idempotency-Key if any.

// WriteRequest is a buffered write as received: its raw JSON body (decoded by this package's
// decoders, so every 422 names the field) and an optional Idempotency-Key.
type WriteRequest struct {
	Key  string
	Body []byte
}

// BufferedAnswer is the 201 body of a buffered write: id for one record, ids and count for a
// bulk registration.
type BufferedAnswer struct {
	ID            string   `json:"id,omitempty" format:"uuid"`
	IDs           []string `json:"ids,omitempty"`
	Count         int      `json:"count,omitempty"`
	TransactionID string   `json:"transaction_id" format:"uuid" doc:"See GET /api/ingest/transactions/{transaction_id}."`
	Status        string   `json:"status" enum:"buffered,committed"`
}

// WriteAnswer is the answer of a buffered write: its status, Location, whether it is the stored
// answer of an earlier request with the same Idempotency-Key, and its body.
type WriteAnswer struct {
	Status   int
	Location string
	Replayed bool
	Body     BufferedAnswer
}

// heldAnswer is what a successful write answers.
type heldAnswer struct {
	location string
	body     BufferedAnswer
}

// unavailable is the 503 of a write or read the buffer or the database could not take.
func (s *Service) unavailable(what string) error {
	return &UnavailableError{What: what, RetryAfter: s.RetryAfter}
}

// idempotent runs a write under the request's Idempotency-Key: the first request with a key
// runs and its answer is kept; later ones with the same body get that answer (replayed), with
// another body 409; one arriving while the first still runs gets 409 with Retry-After.
func (s *Service) idempotent(ctx context.Context, caller Caller, kind, key, method, path string, body []byte, run func() (heldAnswer, error)) (WriteAnswer, error) {
	start := time.Now()
	out, result, err := s.idempotentRun(ctx, caller, key, method, path, body, run)
	if result == "" {
		result = "held"
		var ce *BufferConflictError
		var k problem.Kinded
		switch {
		case err == nil:
		case errors.Is(err, ErrBufferUnavailable):
			result = "unavailable"
		case errors.As(err, &ce), errors.As(err, &k) && k.ProblemKind() == problem.Conflict: // claims, paths, names too
			result = "conflict"
		default:
			result = "refused"
		}
	}
	s.Metrics.Writes.WithLabelValues(kind, result).Inc()
	if err == nil && result == "held" {
		s.Metrics.Enqueue.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	return out, s.writeErr(err)
}

func (s *Service) idempotentRun(ctx context.Context, caller Caller, key, method, path string, body []byte, run func() (heldAnswer, error)) (WriteAnswer, string, error) {
	if key == "" {
		a, err := run()
		if err != nil {
			return WriteAnswer{}, "", err
		}
		return WriteAnswer{Status: http.StatusCreated, Location: a.location, Body: a.body}, "", nil
	}
	user := caller.UserID
	kd := sha256.Sum256([]byte(key))
	keyDigest := hex.EncodeToString(kd[:])
	fp := sha256.New()
	fp.Write([]byte(method + " " + path + "\n"))
	fp.Write(body)
	hash := hex.EncodeToString(fp.Sum(nil))

	prev, err := s.Buffer.BeginIdempotent(ctx, user, keyDigest, hash)
	if err != nil {
		return WriteAnswer{}, "", err
	}
	if prev != nil {
		switch {
		case prev.Hash != hash:
			return WriteAnswer{}, "conflict", conflict("this Idempotency-Key was used with another request body (or route); use a new key for a new request")
		case !prev.Done:
			return WriteAnswer{}, "conflict", &ConflictError{Msg: "a request with this Idempotency-Key is still being processed; retry shortly", RetryAfter: 1}
		}
		var b BufferedAnswer
		_ = json.Unmarshal(prev.Body, &b)
		return WriteAnswer{Status: prev.Status, Location: prev.Location, Replayed: true, Body: b}, "replayed", nil
	}
	a, err := run()
	if err != nil {
		s.Buffer.AbortIdempotent(ctx, user, keyDigest)
		return WriteAnswer{}, "", err
	}
	b, _ := json.Marshal(a.body)
	if err := s.Buffer.FinishIdempotent(ctx, user, keyDigest, IdemEntry{Hash: hash, Status: http.StatusCreated, Location: a.location, Body: b}, s.IdempotencyTTL); err != nil {
		// The write is held; only its answer could not be kept. A retry with this key may then
		// run again: with a client-supplied id that is a replay, else a second record.
		s.Buffer.AbortIdempotent(ctx, user, keyDigest)
	}
	return WriteAnswer{Status: http.StatusCreated, Location: a.location, Body: a.body}, "", nil
}

// writeErr turns the failures of a write into domain errors: a record held with other content
// is a conflict, an unreachable buffer or database a 503; field and other domain errors pass.
func (s *Service) writeErr(err error) error {
	var ce *BufferConflictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return conflict(ce.Error() + " (same id, different content); choose a new id")
	case errors.Is(err, ErrBufferUnavailable):
		return s.unavailable("the buffer (Redis) is unavailable")
	case errors.Is(err, errDatabase):
		return s.unavailable("the database is unavailable to check the references")
	}
	return err
}

// readErr turns the failure of a read (or of a direct write) into a 503: the buffer's, the
// main site's (a direct write at a secondary site with its WAN down), or the database's.
func (s *Service) readErr(err error) error {
	if errors.Is(err, ErrBufferUnavailable) {
		return s.unavailable("the buffer (Redis) is unavailable")
	}
	if database.MainUnreachable(err) {
		return database.ErrMainUnreachable
	}
	return s.unavailable("the database is unavailable")
}

// hold holds a write and answers it.
func (s *Service) hold(ctx context.Context, w Write) (string, error) {
	if s.Direct != nil {
		return s.applyDirect(ctx, w)
	}
	res, err := s.Buffer.Hold(ctx, w)
	if err != nil {
		var ce *BufferConflictError
		if errors.As(err, &ce) && len(w.Items) > 1 {
			return "", conflict(fmt.Sprintf("body.files[%d]: %s (same id, different content); choose a new id", ce.Index, ce.Error()))
		}
		return "", err
	}
	return res.Tx, nil
}

func payload(v func(tx string) any) func(string) ([]byte, error) {
	return func(tx string) ([]byte, error) { return json.Marshal(v(tx)) }
}

// Start records the start of an execution of a planned obs unit (buffered).
func (s *Service) Start(ctx context.Context, caller Caller, req WriteRequest) (WriteAnswer, error) {
	return s.idempotent(ctx, caller, "start", req.Key, http.MethodPost, "/executed_obs_units/start", req.Body, func() (heldAnswer, error) {
		st, err := DecodeStart(req.Body, s.Site)
		if err != nil {
			return heldAnswer{}, err
		}
		if err := s.owns(ctx, caller, st.InstrumentModuleID, "body.instrument_module_id"); err != nil {
			return heldAnswer{}, err
		}
		if err := s.checkObsUnit(ctx, st.ObsUnitID, "body.obs_unit_id"); err != nil {
			return heldAnswer{}, err
		}
		if st.InstrumentModuleID != 0 {
			if err := s.checkModule(ctx, st.InstrumentModuleID, "body.instrument_module_id"); err != nil {
				return heldAnswer{}, err
			}
			if err := s.checkModuleAllowed(ctx, st.ObsUnitID, st.InstrumentModuleID, "body.instrument_module_id"); err != nil {
				return heldAnswer{}, err
			}
		}
		if st.ID == "" {
			st.ID = NewID()
		} else if err := s.checkStartConflict(ctx, st); err != nil {
			return heldAnswer{}, err
		}
		at := time.Now().UTC()
		tx, err := s.hold(ctx, Write{
			Tx: NewID(), TaskType: TaskStart, TaskID: StartTaskID(st.ID),
			Items: []Item{{Kind: KindStart, ID: st.ID, Hash: Hash(st), Record: CacheRecord[Start]{at, st}, Index: s.Buffer.OUIndex(st.ObsUnitID)}},
			Payload: payload(func(tx string) any {
				return StartTask{Envelope: Envelope{TxID: tx, AcceptedAt: at}, Start: st}
			}),
			// Held only while no catalog delete fences its obs unit (fences.go).
			Fences: []string{s.Buffer.OUFence(st.ObsUnitID)},
		})
		var fe *FencedError
		if errors.As(err, &fe) {
			return heldAnswer{}, startFenced(fe, st.ObsUnitID)
		}
		if err != nil {
			return heldAnswer{}, err
		}
		s.known.add("eou:" + st.ID)
		return heldAnswer{location: "/executed_obs_units/" + strconv.FormatInt(st.ObsUnitID, 10),
			body: BufferedAnswer{ID: st.ID, TransactionID: tx, Status: s.writeStatus()}}, nil
	})
}

// Finish records the end of execution rawID (the path's id; buffered).
func (s *Service) Finish(ctx context.Context, caller Caller, rawID string, req WriteRequest) (WriteAnswer, error) {
	path := "/executed_obs_units/" + rawID + "/finish"
	return s.idempotent(ctx, caller, "finish", req.Key, http.MethodPut, path, req.Body, func() (heldAnswer, error) {
		id, ok := ParseUUID(rawID)
		if !ok {
			return heldAnswer{}, problem.Field("path.id", "must be a UUID", rawID)
		}
		f, err := DecodeFinish(req.Body)
		if err != nil {
			return heldAnswer{}, err
		}
		obsUnit, err := s.checkFinish(ctx, id, f, caller.check("path.id"))
		if err != nil {
			return heldAnswer{}, err
		}
		at := time.Now().UTC()
		rec := struct {
			ID     string `json:"id"`
			Finish Finish `json:"finish"`
		}{id, f}
		tx, err := s.hold(ctx, Write{
			Tx: NewID(), TaskType: TaskFinish, TaskID: FinishTaskID(id),
			Items: []Item{{Kind: KindFinish, ID: id, Hash: Hash(rec), Record: CacheRecord[Finish]{at, f},
				Claims: []Claim{{Key: ClaimFinish + id, Owner: Hash(rec)}}}},
			Payload: payload(func(tx string) any {
				return FinishTask{Envelope: Envelope{TxID: tx, AcceptedAt: at}, ID: id, Finish: f}
			}),
		})
		if err != nil {
			var ce *BufferConflictError
			var cc *ClaimConflictError
			if errors.As(err, &ce) || errors.As(err, &cc) {
				return heldAnswer{}, conflict("this execution was already finished with another end_time, status or meta")
			}
			return heldAnswer{}, err
		}
		loc := ""
		if obsUnit != 0 {
			loc = "/executed_obs_units/" + strconv.FormatInt(obsUnit, 10)
		}
		return heldAnswer{location: loc, body: BufferedAnswer{ID: id, TransactionID: tx, Status: s.writeStatus()}}, nil
	})
}

// RegisterFile registers one raw data file (buffered).
func (s *Service) RegisterFile(ctx context.Context, caller Caller, req WriteRequest) (WriteAnswer, error) {
	return s.idempotent(ctx, caller, "file", req.Key, http.MethodPost, "/raw_data_files/", req.Body, func() (heldAnswer, error) {
		f, err := DecodeFile(req.Body, "body")
		if err != nil {
			return heldAnswer{}, err
		}
		if err := s.owns(ctx, caller, f.InstrumentModuleID, "body.instrument_module_id"); err != nil {
			return heldAnswer{}, err
		}
		files := []File{f}
		if err := s.checkFiles(ctx, files, func(int) string { return "body" }); err != nil {
			return heldAnswer{}, err
		}
		tx, err := s.holdFiles(ctx, files, func(int) string { return "body" })
		if err != nil {
			return heldAnswer{}, err
		}
		return heldAnswer{location: "/raw_data_files/" + files[0].ID, body: BufferedAnswer{ID: files[0].ID, TransactionID: tx, Status: s.writeStatus()}}, nil
	})
}

// RegisterFiles registers up to MaxBulkFiles raw data files, all or nothing (buffered).
func (s *Service) RegisterFiles(ctx context.Context, caller Caller, req WriteRequest) (WriteAnswer, error) {
	return s.idempotent(ctx, caller, "bulk", req.Key, http.MethodPost, "/raw_data_files/bulk", req.Body, func() (heldAnswer, error) {
		files, err := DecodeBulkFiles(req.Body)
		if err != nil {
			return heldAnswer{}, err
		}
		prefix := func(i int) string { return "body.files[" + strconv.Itoa(i) + "]" }
		for i, f := range files {
			if caller.mayWrite(f.InstrumentModuleID, "") != nil {
				return heldAnswer{}, s.owns(ctx, caller, f.InstrumentModuleID, prefix(i)+".instrument_module_id")
			}
		}
		if err := s.checkFiles(ctx, files, prefix); err != nil {
			return heldAnswer{}, err
		}
		tx, err := s.holdFiles(ctx, files, prefix)
		if err != nil {
			return heldAnswer{}, err
		}
		ids := make([]string, len(files))
		for i, f := range files {
			ids[i] = f.ID
		}
		return heldAnswer{location: "/api/ingest/transactions/" + tx, body: BufferedAnswer{IDs: ids, Count: len(ids), TransactionID: tx, Status: s.writeStatus()}}, nil
	})
}

// holdFiles assigns missing ids and holds the files as one task, with their claims (FileClaims:
// a path, or a file's package, held by another buffered record is a 409 naming it; prefix(i)
// locates file i in the request). Committed files with the same path or client-chosen id are
// looked for in the database (checkCommittedFiles) only when the buffer's committed filter
// cannot rule them out (ErrUnchecked; at a secondary site or without the filter, always, first).
// Each file is encoded once: its fingerprint, its cache entry (cacheRecord) and the task are
// made of the same bytes (a 1,000-file bulk spent a third of its API time encoding them thrice).
func (s *Service) holdFiles(ctx context.Context, files []File, prefix func(int) string) (string, error) {
	at := time.Now().UTC()
	atJSON, err := json.Marshal(at)
	if err != nil {
		return "", err
	}
	items := make([]Item, len(files))
	encoded := make([]json.RawMessage, len(files))
	clientID := make([]bool, len(files))
	for i := range files {
		if clientID[i] = files[i].ID != ""; !clientID[i] {
			files[i].ID = NewID()
		}
		f := files[i]
		// rec is cacheRecord{at, f} as json.Marshal encodes it; b, the file's own encoding inside it.
		rec := make([]byte, 0, len(atJSON)+len(f.Path)+len(f.Meta)+256)
		rec = append(append(append(rec, `{"at":`...), atJSON...), `,"r":`...)
		start := len(rec)
		if rec, err = f.AppendJSON(rec); err != nil {
			return "", err
		}
		b := rec[start:len(rec):len(rec)]
		rec = append(rec, '}')
		encoded[i] = b
		items[i] = Item{Kind: KindFile, ID: f.ID, Hash: HashJSON(b), Record: json.RawMessage(rec), Claims: FileClaims(f)}
		if s.CommittedFilter { // a secondary site keeps no filter: it asks its replica
			items[i].Unique = FileUnique(f)
		}
		if f.RawDataPackageID != "" {
			items[i].Index = s.Buffer.PackageIndex(f.RawDataPackageID)
		}
	}
	w := Write{
		Tx: NewID(), TaskType: TaskFiles, TaskID: FilesTaskID(files), Items: items,
		Payload: func(tx string) ([]byte, error) {
			return EncodeFilesTask(Envelope{TxID: tx, AcceptedAt: at}, encoded)
		},
		Checked: !s.CommittedFilter || s.Direct != nil,
	}
	for i, f := range files {
		if clientID[i] && !IDInFilter(f.ID) {
			w.Checked = true // a version 7 id the filter does not hold (IDInFilter)
		}
	}
	if w.Checked {
		if err := s.checkCommittedFiles(ctx, files, clientID, prefix); err != nil {
			return "", err
		}
	}
	tx, err := s.hold(ctx, w)
	if errors.Is(err, ErrUnchecked) {
		if err := s.checkCommittedFiles(ctx, files, clientID, prefix); err != nil {
			return "", err
		}
		w.Checked = true
		tx, err = s.hold(ctx, w)
	}
	if err == nil && s.Metrics != nil {
		by := "filter"
		if w.Checked {
			by = "database"
		}
		s.Metrics.CommittedLookups.WithLabelValues(by).Inc()
	}
	var cc *ClaimConflictError
	if errors.As(err, &cc) {
		c := cc.Conflicts[0]
		f := files[c.Item]
		if strings.HasPrefix(c.Claim.Key, ClaimMember) {
			return "", &MembershipConflictError{Loc: prefix(c.Item) + ".raw_data_package_id", Files: map[string]string{f.ID: c.Owner}}
		}
		return "", &PathConflictError{Loc: prefix(c.Item) + ".path", Path: f.Path, Module: f.InstrumentModuleID, ExistingID: c.Owner}
	}
	return tx, err
}

// CreatePackage creates a raw data package, status building (buffered).
func (s *Service) CreatePackage(ctx context.Context, caller Caller, req WriteRequest) (WriteAnswer, error) {
	return s.idempotent(ctx, caller, "package", req.Key, http.MethodPost, "/raw_data_package/", req.Body, func() (heldAnswer, error) {
		p, err := DecodePackage(req.Body)
		if err != nil {
			return heldAnswer{}, err
		}
		if err := s.owns(ctx, caller, p.InstrumentModuleID, "body.instrument_module_id"); err != nil {
			return heldAnswer{}, err
		}
		clientID := p.ID != ""
		if !clientID {
			p.ID = NewID()
		}
		if err := s.checkPackage(ctx, p, clientID); err != nil {
			return heldAnswer{}, err
		}
		at := time.Now().UTC()
		tx, err := s.hold(ctx, Write{
			Tx: NewID(), TaskType: TaskPackage, TaskID: PackageTaskID(p.ID),
			Items: []Item{{Kind: KindPackage, ID: p.ID, Hash: Hash(p), Record: CacheRecord[Package]{at, p}, Claims: PackageClaims(p)}},
			Payload: payload(func(tx string) any {
				return PackageTask{Envelope: Envelope{TxID: tx, AcceptedAt: at}, Package: p}
			}),
		})
		var cc *ClaimConflictError
		if errors.As(err, &cc) {
			return heldAnswer{}, packageClaimConflict(p, cc)
		}
		if err != nil {
			return heldAnswer{}, err
		}
		return heldAnswer{location: "/raw_data_package/" + p.ID, body: BufferedAnswer{ID: p.ID, TransactionID: tx, Status: s.writeStatus()}}, nil
	})
}

// packageClaimConflict is the 409 of a package whose name or files another buffered package
// holds: the name first, else every file held, with its package.
func packageClaimConflict(p Package, cc *ClaimConflictError) error {
	taken := map[string]string{}
	for _, c := range cc.Conflicts {
		if strings.HasPrefix(c.Claim.Key, ClaimName) {
			return &NameConflictError{Execution: p.ExecutedObsUnitID, Name: p.Name, ExistingID: c.Owner}
		}
		taken[strings.TrimPrefix(c.Claim.Key, ClaimMember)] = c.Owner
	}
	return &MembershipConflictError{Loc: "body.file_ids", Files: taken}
}

// writeStatus is what a held write answers: buffered, or committed without buffering.
func (s *Service) writeStatus() string {
	if s.Direct != nil {
		return Committed
	}
	return Buffered
}

// applyDirect applies a write to the database at once (buffering disabled) with the worker's
// statements, and records its receipt as committed.
func (s *Service) applyDirect(ctx context.Context, w Write) (string, error) {
	// Every API's committed filter learns what the write commits (buffer/committed.go) before
	// it is committed, for when buffering is enabled again.
	if err := s.Buffer.LearnCommitted(ctx, w.Items); err != nil {
		return "", err
	}
	payload, err := w.Payload(w.Tx)
	if err != nil {
		return "", err
	}
	var c Commit
	switch w.TaskType {
	case TaskStart:
		var t StartTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = s.Direct.ApplyStart(ctx, t)
		}
	case TaskFinish:
		var t FinishTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = s.Direct.ApplyFinish(ctx, t)
		}
	case TaskFiles:
		var t FilesTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = s.Direct.ApplyFiles(ctx, t)
		}
	case TaskPackage:
		var t PackageTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = s.Direct.ApplyPackage(ctx, t)
		}
	default:
		return "", fmt.Errorf("unknown task type %s", w.TaskType)
	}
	var pe *PermanentError
	switch {
	case errors.As(err, &pe):
		return "", conflict("the write conflicts with the database: " + pe.Err.Error())
	case err != nil:
		return "", dbErr(err)
	}
	s.Buffer.RecordDirect(ctx, w, c.LSN, c.At)
	return w.Tx, nil
}
