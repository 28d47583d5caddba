package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/postgres"
)

// writeInput is a buffered write: its raw body (decoded by the ingest package) and an optional
// Idempotency-Key.
type writeInput struct {
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"Makes retries safe: the same key and body answer the original response (Idempotency-Replayed: true); another body 409. Kept 24 h."`
	RawBody        []byte `doc:"JSON body (see the schema)."`
}

// finishInput is a finish: the execution's id and the write.
type finishInput struct {
	ID             string `path:"id" doc:"The executed obs unit (UUID)."`
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255"`
	RawBody        []byte `doc:"JSON body (see the schema)."`
}

// BufferedAnswer is the 201 body of a buffered write (DESIGN §4): id for one record, ids and
// count for a bulk registration.
type BufferedAnswer struct {
	ID            string   `json:"id,omitempty" format:"uuid"`
	IDs           []string `json:"ids,omitempty"`
	Count         int      `json:"count,omitempty"`
	TransactionID string   `json:"transaction_id" format:"uuid" doc:"See GET /api/ingest/transactions/{transaction_id}."`
	Status        string   `json:"status" enum:"buffered,committed"`
}

// writeOutput is the answer of a buffered write.
type writeOutput struct {
	Status   int    `json:"-"`
	Location string `header:"Location"`
	Replayed string `header:"Idempotency-Replayed" doc:"true when this is the stored answer of an earlier request with the same Idempotency-Key."`
	Body     BufferedAnswer
}

// held is what a successful write answers.
type held struct {
	location string
	body     BufferedAnswer
}

// invalid turns field errors into a 422 problem naming each field.
func invalid(err error) error {
	var ve ingest.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	details := make([]error, len(ve))
	for i, f := range ve {
		details[i] = &huma.ErrorDetail{Location: f.Location, Message: f.Message, Value: f.Value}
	}
	return huma.Error422UnprocessableEntity("validation failed: "+ve[0].Location+": "+ve[0].Message, details...)
}

// fieldError is a 422 for one field.
func fieldError(loc, msg string, value any) error {
	return invalid(ingest.ValidationError{{Location: loc, Message: msg, Value: value}})
}

// unavailable is the 503 of a write the buffer or the database could not take.
func (h *Handlers) unavailable(what string) error {
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(what+"; nothing was recorded, retry after the indicated delay"),
		http.Header{"Retry-After": {strconv.Itoa(h.RetryAfter)}})
}

// idempotent runs a write under the request's Idempotency-Key: the first request with a key
// runs and its answer is kept; later ones with the same body get that answer (replayed), with
// another body 409; one arriving while the first still runs gets 409 with Retry-After.
func (h *Handlers) idempotent(ctx context.Context, kind, key, method, path string, body []byte, run func() (held, error)) (*writeOutput, error) {
	start := time.Now()
	out, result, err := h.idempotentRun(ctx, key, method, path, body, run)
	if result == "" {
		result = "held"
		var ce *buffer.ConflictError
		switch {
		case err == nil:
		case buffer.IsUnavailable(err):
			result = "unavailable"
		case errors.As(err, &ce):
			result = "conflict"
		default:
			result = "refused"
		}
	}
	h.Metrics.Writes.WithLabelValues(kind, result).Inc()
	if err == nil && result == "held" {
		h.Metrics.Enqueue.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	return out, h.mapError(err)
}

func (h *Handlers) idempotentRun(ctx context.Context, key, method, path string, body []byte, run func() (held, error)) (*writeOutput, string, error) {
	if key == "" {
		a, err := run()
		if err != nil {
			return nil, "", err
		}
		return &writeOutput{Status: http.StatusCreated, Location: a.location, Body: a.body}, "", nil
	}
	p := authn.PrincipalFrom(ctx)
	var user int64
	if p != nil {
		user = p.UserID
	}
	kd := sha256.Sum256([]byte(key))
	keyDigest := hex.EncodeToString(kd[:])
	fp := sha256.New()
	fp.Write([]byte(method + " " + path + "\n"))
	fp.Write(body)
	hash := hex.EncodeToString(fp.Sum(nil))

	prev, err := h.Buffer.BeginIdempotent(ctx, user, keyDigest, hash)
	if err != nil {
		return nil, "", err
	}
	if prev != nil {
		switch {
		case prev.Hash != hash:
			return nil, "conflict", huma.Error409Conflict("this Idempotency-Key was used with another request body (or route); use a new key for a new request")
		case !prev.Done:
			return nil, "conflict", huma.ErrorWithHeaders(huma.Error409Conflict("a request with this Idempotency-Key is still being processed; retry shortly"),
				http.Header{"Retry-After": {"1"}})
		}
		var b BufferedAnswer
		_ = json.Unmarshal(prev.Body, &b)
		return &writeOutput{Status: prev.Status, Location: prev.Location, Replayed: "true", Body: b}, "replayed", nil
	}
	a, err := run()
	if err != nil {
		h.Buffer.AbortIdempotent(ctx, user, keyDigest)
		return nil, "", err
	}
	b, _ := json.Marshal(a.body)
	if err := h.Buffer.FinishIdempotent(ctx, user, keyDigest, buffer.IdemEntry{Hash: hash, Status: http.StatusCreated, Location: a.location, Body: b}, h.IdempotencyTTL); err != nil {
		// The write is held; only its answer could not be kept. A retry with this key may then
		// run again: with a client-supplied id that is a replay, else a second record.
		h.Buffer.AbortIdempotent(ctx, user, keyDigest)
	}
	return &writeOutput{Status: http.StatusCreated, Location: a.location, Body: a.body}, "", nil
}

// mapError turns domain errors into problems.
func (h *Handlers) mapError(err error) error {
	var ce *buffer.ConflictError
	var ve ingest.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		return invalid(err)
	case errors.As(err, &ce):
		return huma.Error409Conflict(ce.Error() + " (same id, different content); choose a new id")
	case buffer.IsUnavailable(err):
		return h.unavailable("the buffer (Redis) is unavailable")
	case errors.Is(err, errDatabase):
		return h.unavailable("the database is unavailable to check the references")
	}
	return err
}

// errDatabase wraps a database failure while validating references.
var errDatabase = errors.New("database unavailable")

func dbErr(err error) error { return fmt.Errorf("%w: %v", errDatabase, err) }

// hold holds a write and answers it.
func (h *Handlers) hold(ctx context.Context, w buffer.Write) (string, error) {
	if h.Direct != nil {
		return h.applyDirect(ctx, w)
	}
	res, err := h.Buffer.Hold(ctx, w)
	if err != nil {
		var ce *buffer.ConflictError
		if errors.As(err, &ce) && len(w.Items) > 1 {
			return "", huma.Error409Conflict(fmt.Sprintf("body.files[%d]: %s (same id, different content); choose a new id", ce.Index, ce.Error()))
		}
		return "", err
	}
	return res.Tx, nil
}

// cacheRecord is how a record sits in the read cache: with the time it was accepted.
type cacheRecord[T any] struct {
	At time.Time `json:"at"`
	R  T         `json:"r"`
}

func payload(v func(tx string) any) func(string) ([]byte, error) {
	return func(tx string) ([]byte, error) { return json.Marshal(v(tx)) }
}

func (h *Handlers) start(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return h.idempotent(ctx, "start", in.IdempotencyKey, http.MethodPost, "/executed_obs_units/start", in.RawBody, func() (held, error) {
		s, err := ingest.DecodeStart(in.RawBody, h.Site)
		if err != nil {
			return held{}, err
		}
		if err := h.checkObsUnit(ctx, s.ObsUnitID, "body.obs_unit_id"); err != nil {
			return held{}, err
		}
		if s.InstrumentModuleID != 0 {
			if err := h.checkModule(ctx, s.InstrumentModuleID, "body.instrument_module_id"); err != nil {
				return held{}, err
			}
		}
		if s.ID == "" {
			s.ID = ingest.NewID()
		} else if err := h.checkStartConflict(ctx, s); err != nil {
			return held{}, err
		}
		at := time.Now().UTC()
		tx, err := h.hold(ctx, buffer.Write{
			Tx: ingest.NewID(), TaskType: ingest.TaskStart, TaskID: ingest.StartTaskID(s.ID),
			Items: []buffer.Item{{Kind: buffer.KindStart, ID: s.ID, Hash: ingest.Hash(s), Record: cacheRecord[ingest.Start]{at, s}, Index: buffer.OUIndex(s.ObsUnitID)}},
			Payload: payload(func(tx string) any {
				return ingest.StartTask{Envelope: ingest.Envelope{TxID: tx, AcceptedAt: at}, Start: s}
			}),
		})
		if err != nil {
			return held{}, err
		}
		h.known.add("eou:" + s.ID)
		return held{location: "/executed_obs_units/" + strconv.FormatInt(s.ObsUnitID, 10),
			body: BufferedAnswer{ID: s.ID, TransactionID: tx, Status: h.writeStatus()}}, nil
	})
}

func (h *Handlers) finish(ctx context.Context, in *finishInput) (*writeOutput, error) {
	path := "/executed_obs_units/" + in.ID + "/finish"
	return h.idempotent(ctx, "finish", in.IdempotencyKey, http.MethodPut, path, in.RawBody, func() (held, error) {
		id, ok := ingest.ParseUUID(in.ID)
		if !ok {
			return held{}, fieldError("path.id", "must be a UUID", in.ID)
		}
		f, err := ingest.DecodeFinish(in.RawBody)
		if err != nil {
			return held{}, err
		}
		obsUnit, err := h.checkFinish(ctx, id, f)
		if err != nil {
			return held{}, err
		}
		at := time.Now().UTC()
		rec := struct {
			ID     string        `json:"id"`
			Finish ingest.Finish `json:"finish"`
		}{id, f}
		tx, err := h.hold(ctx, buffer.Write{
			Tx: ingest.NewID(), TaskType: ingest.TaskFinish, TaskID: ingest.FinishTaskID(id),
			Items: []buffer.Item{{Kind: buffer.KindFinish, ID: id, Hash: ingest.Hash(rec), Record: cacheRecord[ingest.Finish]{at, f}}},
			Payload: payload(func(tx string) any {
				return ingest.FinishTask{Envelope: ingest.Envelope{TxID: tx, AcceptedAt: at}, ID: id, Finish: f}
			}),
		})
		if err != nil {
			var ce *buffer.ConflictError
			if errors.As(err, &ce) {
				return held{}, huma.Error409Conflict("this execution was already finished with another end_time, status or meta")
			}
			return held{}, err
		}
		loc := ""
		if obsUnit != 0 {
			loc = "/executed_obs_units/" + strconv.FormatInt(obsUnit, 10)
		}
		return held{location: loc, body: BufferedAnswer{ID: id, TransactionID: tx, Status: h.writeStatus()}}, nil
	})
}

func (h *Handlers) registerFile(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return h.idempotent(ctx, "file", in.IdempotencyKey, http.MethodPost, "/raw_data_files/", in.RawBody, func() (held, error) {
		f, err := ingest.DecodeFile(in.RawBody, "body")
		if err != nil {
			return held{}, err
		}
		files := []ingest.File{f}
		if err := h.checkFiles(ctx, files, func(int) string { return "body" }); err != nil {
			return held{}, err
		}
		tx, err := h.holdFiles(ctx, files)
		if err != nil {
			return held{}, err
		}
		return held{location: "/raw_data_files/" + files[0].ID, body: BufferedAnswer{ID: files[0].ID, TransactionID: tx, Status: h.writeStatus()}}, nil
	})
}

func (h *Handlers) registerBulk(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return h.idempotent(ctx, "bulk", in.IdempotencyKey, http.MethodPost, "/raw_data_files/bulk", in.RawBody, func() (held, error) {
		files, err := ingest.DecodeBulkFiles(in.RawBody)
		if err != nil {
			return held{}, err
		}
		if err := h.checkFiles(ctx, files, func(i int) string { return "body.files[" + strconv.Itoa(i) + "]" }); err != nil {
			return held{}, err
		}
		tx, err := h.holdFiles(ctx, files)
		if err != nil {
			return held{}, err
		}
		ids := make([]string, len(files))
		for i, f := range files {
			ids[i] = f.ID
		}
		return held{location: "/api/ingest/transactions/" + tx, body: BufferedAnswer{IDs: ids, Count: len(ids), TransactionID: tx, Status: h.writeStatus()}}, nil
	})
}

// holdFiles assigns missing ids and holds the files as one task.
// Each file is encoded once: its fingerprint, its cache entry (cacheRecord) and the task are
// made of the same bytes (a 1,000-file bulk spent a third of its API time encoding them thrice).
func (h *Handlers) holdFiles(ctx context.Context, files []ingest.File) (string, error) {
	at := time.Now().UTC()
	atJSON, err := json.Marshal(at)
	if err != nil {
		return "", err
	}
	items := make([]buffer.Item, len(files))
	encoded := make([]json.RawMessage, len(files))
	for i := range files {
		if files[i].ID == "" {
			files[i].ID = ingest.NewID()
		}
		f := files[i]
		b, err := json.Marshal(f)
		if err != nil {
			return "", err
		}
		encoded[i] = b
		rec := make([]byte, 0, len(atJSON)+len(b)+12)
		rec = append(append(append(append(append(rec, `{"at":`...), atJSON...), `,"r":`...), b...), '}') // cacheRecord{at, f}
		items[i] = buffer.Item{Kind: buffer.KindFile, ID: f.ID, Hash: ingest.HashJSON(b), Record: json.RawMessage(rec)}
		if f.RawDataPackageID != "" {
			items[i].Index = buffer.PackageIndex(f.RawDataPackageID)
		}
	}
	return h.hold(ctx, buffer.Write{
		Tx: ingest.NewID(), TaskType: ingest.TaskFiles, TaskID: ingest.FilesTaskID(files), Items: items,
		Payload: func(tx string) ([]byte, error) {
			return ingest.EncodeFilesTask(ingest.Envelope{TxID: tx, AcceptedAt: at}, encoded)
		},
	})
}

func (h *Handlers) createPackage(ctx context.Context, in *writeInput) (*writeOutput, error) {
	return h.idempotent(ctx, "package", in.IdempotencyKey, http.MethodPost, "/raw_data_package/", in.RawBody, func() (held, error) {
		p, err := ingest.DecodePackage(in.RawBody)
		if err != nil {
			return held{}, err
		}
		if err := h.checkPackage(ctx, p); err != nil {
			return held{}, err
		}
		if p.ID == "" {
			p.ID = ingest.NewID()
		}
		at := time.Now().UTC()
		tx, err := h.hold(ctx, buffer.Write{
			Tx: ingest.NewID(), TaskType: ingest.TaskPackage, TaskID: ingest.PackageTaskID(p.ID),
			Items: []buffer.Item{{Kind: buffer.KindPackage, ID: p.ID, Hash: ingest.Hash(p), Record: cacheRecord[ingest.Package]{at, p}}},
			Payload: payload(func(tx string) any {
				return ingest.PackageTask{Envelope: ingest.Envelope{TxID: tx, AcceptedAt: at}, Package: p}
			}),
		})
		if err != nil {
			return held{}, err
		}
		return held{location: "/raw_data_package/" + p.ID, body: BufferedAnswer{ID: p.ID, TransactionID: tx, Status: h.writeStatus()}}, nil
	})
}

// sameJSON compares two JSON documents by value (jsonb reorders keys).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// writeStatus is what a held write answers: buffered, or committed without buffering.
func (h *Handlers) writeStatus() string {
	if h.Direct != nil {
		return ingest.Committed
	}
	return ingest.Buffered
}

// applyDirect applies a write to the database at once (buffering disabled) with the worker's
// statements, and records its receipt as committed.
func (h *Handlers) applyDirect(ctx context.Context, w buffer.Write) (string, error) {
	payload, err := w.Payload(w.Tx)
	if err != nil {
		return "", err
	}
	var c postgres.Commit
	switch w.TaskType {
	case ingest.TaskStart:
		var t ingest.StartTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = h.Direct.ApplyStart(ctx, t)
		}
	case ingest.TaskFinish:
		var t ingest.FinishTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = h.Direct.ApplyFinish(ctx, t)
		}
	case ingest.TaskFiles:
		var t ingest.FilesTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = h.Direct.ApplyFiles(ctx, t)
		}
	case ingest.TaskPackage:
		var t ingest.PackageTask
		if err = json.Unmarshal(payload, &t); err == nil {
			c, err = h.Direct.ApplyPackage(ctx, t)
		}
	default:
		return "", fmt.Errorf("unknown task type %s", w.TaskType)
	}
	var pe *postgres.PermanentError
	switch {
	case errors.As(err, &pe):
		return "", huma.Error409Conflict("the write conflicts with the database: " + pe.Err.Error())
	case err != nil:
		return "", dbErr(err)
	}
	h.Buffer.RecordDirect(ctx, w, c.LSN, c.At)
	return w.Tx, nil
}
