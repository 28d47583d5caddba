package cmd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
	"github.com/obsops/obsops/pkg/jsonenc"
)

// MaxRegisterBatch is the most files one bulk request of `ingest register` carries.
const MaxRegisterBatch = 1000

// DefaultRegisterInFlight is how many bulk requests `ingest register` has outstanding at once
// unless --in-flight says: two keep the API busy while the command plans (fsync) and reads the
// answer of the other, and keep the server's share of a small machine for the server.
const DefaultRegisterInFlight = 2

// MaxRegisterInFlight bounds --in-flight (and so the batches held in memory).
const MaxRegisterInFlight = 16

// registerFile is one file of a registration: what the bulk request carries for it.
type registerFile struct {
	ID       string `json:"id"`
	Path     string `json:"path"`
	Size     int64  `json:"size_bytes"`
	Checksum string `json:"checksum"`
}

// stateLine is one line of a registration's state file (JSON lines, appended and synced):
// a header, a batch planned (its files, ids and idempotency key, written before it is sent), or
// a batch acknowledged (its receipt). A rerun resends planned batches that were never
// acknowledged, with the same key and body (the API answers the original: never a duplicate),
// and registers only files in no batch.
type stateLine struct {
	Dir       string         `json:"dir,omitempty"`
	Execution string         `json:"execution,omitempty"`
	Module    int64          `json:"module,omitempty"`
	Algorithm string         `json:"checksum,omitempty"`
	Package   string         `json:"package,omitempty"`
	Batch     *int           `json:"batch,omitempty"`
	Key       string         `json:"key,omitempty"`
	Files     []registerFile `json:"files,omitempty"`
	Done      *int           `json:"done,omitempty"`
	TxID      string         `json:"transaction_id,omitempty"`
	Status    string         `json:"status,omitempty"`
}

// registration is one `ingest register` run.
type registration struct {
	dir, execution, algorithm, pkg string
	module                         int64
	batch, workers, inFlight       int
	statePath                      string
	progress                       bool
	stderr                         io.Writer
}

// batchState is what the state file says of one batch.
type batchState struct {
	n     int
	key   string
	files []registerFile
	txID  string
	stat  string
	done  bool
	// resent: planned by an earlier run, sent again by this one.
	resent bool
}

// fileID is a file's client-chosen id: a UUID (version 8, RFC 9562) made from the execution,
// the module and the path, so the same file always gets the same id, even without a state file.
func fileID(execution string, module int64, path string) string {
	in := make([]byte, 0, 64+len(execution)+len(path))
	in = append(in, "obsops-register\x00"...)
	in = append(in, execution...)
	in = append(in, 0)
	in = strconv.AppendInt(in, module, 10)
	in = append(in, 0)
	in = append(in, path...)
	h := sha256.Sum256(in)
	b := h[:16]
	b[6] = (b[6] & 0x0f) | 0x80
	b[8] = (b[8] & 0x3f) | 0x80
	out := make([]byte, 0, 36)
	out = hex.AppendEncode(out, b[0:4])
	out = hex.AppendEncode(append(out, '-'), b[4:6])
	out = hex.AppendEncode(append(out, '-'), b[6:8])
	out = hex.AppendEncode(append(out, '-'), b[8:10])
	out = hex.AppendEncode(append(out, '-'), b[10:16])
	return string(out)
}

// batchKey is a batch's Idempotency-Key: made from its files' ids.
func batchKey(files []registerFile) string {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.ID))
	}
	return "register-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// walk lists the regular files under dir (relative, slash-separated, sorted), skipping skip.
func walk(dir, skip string) ([]string, error) {
	var out []string
	prefix := len(filepath.Join(dir, "x")) - 1 // dir and its separator, as WalkDir joins them
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || p == skip {
			return nil
		}
		if len(p) <= prefix {
			return nil
		}
		out = append(out, filepath.ToSlash(p[prefix:]))
		return nil
	})
	slices.Sort(out)
	return out, err
}

// readState reads the state file (missing: nothing registered yet) and how many of its bytes are
// whole lines: a line cut short by a crash (no newline, or not JSON) ends what stands.
func (r *registration) readState() ([]*batchState, int64, error) {
	f, err := os.Open(r.statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	byN := map[int]*batchState{}
	var order []*batchState
	var valid int64
	rd := bufio.NewReaderSize(f, 1<<20)
	first := true
	for {
		line, err := rd.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return order, valid, nil // a last line without its newline is cut short
		}
		if err != nil {
			return nil, 0, err
		}
		var l stateLine
		if err := json.Unmarshal(line, &l); err != nil {
			return order, valid, nil
		}
		valid += int64(len(line))
		switch {
		case first:
			first = false
			if l.Execution != r.execution || l.Module != r.module || l.Algorithm != r.algorithm || l.Package != r.pkg {
				return nil, 0, fmt.Errorf("state file %s belongs to another registration (execution %s, module %d, checksum %s): use --state to choose another",
					r.statePath, l.Execution, l.Module, l.Algorithm)
			}
		case l.Batch != nil:
			b := &batchState{n: *l.Batch, key: l.Key, files: l.Files}
			byN[b.n] = b
			order = append(order, b)
		case l.Done != nil:
			if b := byN[*l.Done]; b != nil {
				b.done, b.txID, b.stat = true, l.TxID, l.Status
			}
		}
	}
}

// dropCutLine truncates the state file to its whole lines (readState's count), so that a run
// resumed after a crash in the middle of a write appends after the last whole line: lines
// appended after a cut one would never be read again.
// A file with no whole line of a registration's state is refused, never truncated.
func dropCutLine(path string, valid int64) error {
	st, err := os.Stat(path)
	if err != nil || st.Size() <= valid {
		return nil // missing: nothing to drop
	}
	if valid == 0 {
		return fmt.Errorf("%s is not the state file of a registration: use --state to choose another", path)
	}
	return os.Truncate(path, valid)
}

// stateWriter appends lines to the state file. A batch's "planned" line is synced before the
// batch is sent; "done" lines are added without a sync of their own and reach the file with the
// next "planned" lines (or at the end of the run), in one write and one sync: at most one fsync
// per batch, fewer when several batches are planned together. A "done" line lost to a crash
// costs only a resend with the same key and body, which the API answers with the original.
type stateWriter struct {
	f   *os.File
	buf []byte
}

// add appends l to what the next flush writes.
func (w *stateWriter) add(l stateLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	w.buf = append(append(w.buf, b...), '\n')
	return nil
}

// flush writes what was added in one write, then syncs the file if sync.
func (w *stateWriter) flush(sync bool) error {
	if len(w.buf) > 0 {
		if _, err := w.f.Write(w.buf); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	if !sync {
		return nil
	}
	return w.f.Sync()
}

// addPlanned appends the "planned" line of b, byte for byte json.Marshal's of stateLine{Batch,
// Key, Files} (TestPlannedLineIsJSONMarshal), written directly like the bulk body.
func (w *stateWriter) addPlanned(b *batchState) {
	out := append(w.buf, `{"batch":`...)
	out = strconv.AppendInt(out, int64(b.n), 10)
	if b.key != "" {
		out = append(out, `,"key":`...)
		out = jsonenc.AppendString(out, b.key)
	}
	if len(b.files) > 0 {
		out = append(out, `,"files":[`...)
		for i, f := range b.files {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = jsonenc.AppendString(out, f.ID)
			out = append(appendPathSizeChecksum(out, f), '}')
		}
		out = append(out, ']')
	}
	w.buf = append(out, "}\n"...)
}

// Checksummer computes the checksums of `ingest register`, one file at a time, reusing its read
// buffer and hashes (io.Copy from an *os.File into a hash allocates 32 KiB per call, which
// dominates on small files) and, on Unix, reading with openat/read/close relative to the
// file's directory, kept open from one file to the next (see fileReader). One per goroutine;
// Close releases it. Exported so TestBenchCLIRegister measures what the command uses.
type Checksummer struct {
	buf   []byte
	xxh   *xxhash.Digest
	sha   hash.Hash
	hexb  []byte
	files fileReader
}

// NewChecksummer returns a checksummer with a 64 KiB read buffer.
func NewChecksummer() *Checksummer {
	return &Checksummer{buf: make([]byte, 64<<10), xxh: xxhash.New(), sha: sha256.New(),
		hexb: make([]byte, 0, 2*sha256.Size), files: newFileReader()}
}

// Close closes the directory the checksummer keeps open, if any.
func (c *Checksummer) Close() { c.files.close() }

// Sum computes "alg:hex" (alg xxh64 or sha256) of the file at path.
func (c *Checksummer) Sum(path, alg string) (string, error) {
	sum, _, err := c.SumSize(path, alg)
	return sum, err
}

// SumSize computes "alg:hex" (alg xxh64 or sha256) of the file at path and its size (the bytes
// the checksum covers).
func (c *Checksummer) SumSize(path, alg string) (string, int64, error) {
	var h hash.Hash = c.xxh
	if alg == "sha256" {
		h = c.sha
	}
	h.Reset()
	size, err := c.files.readInto(path, c.buf, h)
	if err != nil {
		return "", 0, err
	}
	var sum [sha256.Size]byte
	c.hexb = hex.AppendEncode(append(append(c.hexb[:0], alg...), ':'), h.Sum(sum[:0]))
	return string(c.hexb), size, nil
}

// describe computes the entries of paths in parallel, one goroutine per checksummer, each
// taking the next 16 files in turn (no hand-off per file), and returns them in order.
func (r *registration) describe(paths []string, sums []*Checksummer, bar *progressbar.ProgressBar) ([]registerFile, error) {
	const chunk = 16
	out := make([]registerFile, len(paths))
	errs := make([]error, len(paths))
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(chunk)) - chunk
				if lo >= len(paths) {
					return
				}
				for i := lo; i < min(lo+chunk, len(paths)); i++ {
					sum, size, err := c.SumSize(filepath.Join(r.dir, filepath.FromSlash(paths[i])), r.algorithm)
					if err != nil {
						errs[i] = err
						continue
					}
					out[i] = registerFile{ID: fileID(r.execution, r.module, paths[i]), Path: paths[i], Size: size, Checksum: sum}
					if bar != nil {
						_ = bar.Add64(size)
					}
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// bulkBody is the body of a batch's bulk request, byte for byte what json.Marshal makes of
// {"files": [{id, executed_obs_unit_id, instrument_module_id, path, size_bytes, checksum,
// raw_data_package_id (omitted when empty)}]} (TestBulkBodyIsJSONMarshal), written directly:
// encoding it by reflection was the command's largest cost after reading the files.
func (r *registration) bulkBody(files []registerFile) []byte {
	out := make([]byte, 0, len(files)*(200+len(r.pkg)))
	out = append(out, `{"files":[`...)
	for i, f := range files {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"id":`...)
		out = jsonenc.AppendString(out, f.ID)
		out = append(out, `,"executed_obs_unit_id":`...)
		out = jsonenc.AppendString(out, r.execution)
		out = append(out, `,"instrument_module_id":`...)
		out = strconv.AppendInt(out, r.module, 10)
		out = appendPathSizeChecksum(out, f)
		if r.pkg != "" {
			out = append(out, `,"raw_data_package_id":`...)
			out = jsonenc.AppendString(out, r.pkg)
		}
		out = append(out, '}')
	}
	return append(out, "]}"...)
}

// appendPathSizeChecksum appends a file's path, size and checksum fields, in the order of
// registerFile and of the bulk request's file.
func appendPathSizeChecksum(out []byte, f registerFile) []byte {
	out = append(out, `,"path":`...)
	out = jsonenc.AppendString(out, f.Path)
	out = append(out, `,"size_bytes":`...)
	out = strconv.AppendInt(out, f.Size, 10)
	out = append(out, `,"checksum":`...)
	return jsonenc.AppendString(out, f.Checksum)
}

// send registers one batch with its idempotency key.
func (r *registration) send(ctx context.Context, c *client.Client, tok string, b *batchState) error {
	key := b.key
	resp, err := c.API.RegisterRawDataFilesBulkWithBodyWithResponse(ctx, &api.RegisterRawDataFilesBulkParams{IdempotencyKey: &key}, "application/json", bytes.NewReader(r.bulkBody(b.files)))
	if err := checkResp(tok, resp, err); err != nil {
		return fmt.Errorf("batch %d (%d files from %s): %w", b.n, len(b.files), b.files[0].Path, err)
	}
	if resp.JSON201 != nil {
		b.txID, b.stat, b.done = resp.JSON201.TransactionId.String(), string(resp.JSON201.Status), true
		return nil
	}
	var ans struct {
		TransactionID string `json:"transaction_id"`
		Status        string `json:"status"`
	}
	if err := json.Unmarshal(resp.Body, &ans); err != nil {
		return err
	}
	b.txID, b.stat, b.done = ans.TransactionID, ans.Status, true
	return nil
}

// run registers what is missing and returns every batch (for the receipts).
func (r *registration) run(ctx context.Context, c *client.Client, tok string) ([]*batchState, error) {
	abs, err := filepath.Abs(r.dir)
	if err != nil {
		return nil, err
	}
	r.dir = abs
	stateAbs, _ := filepath.Abs(r.statePath)
	paths, err := walk(r.dir, stateAbs)
	if err != nil {
		return nil, err
	}
	batches, valid, err := r.readState()
	if err != nil {
		return nil, err
	}
	if err := dropCutLine(r.statePath, valid); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(r.statePath), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(r.statePath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sw := &stateWriter{f: f}
	if st, _ := f.Stat(); st.Size() == 0 {
		// Written and synced with the first batch planned (or at the end): nothing is sent before.
		if err := sw.add(stateLine{Dir: r.dir, Execution: r.execution, Module: r.module, Algorithm: r.algorithm, Package: r.pkg}); err != nil {
			return nil, err
		}
	}

	inBatch := map[string]bool{}
	doneFiles, resend := 0, 0
	for _, b := range batches {
		for _, f := range b.files {
			inBatch[f.Path] = true
		}
		if b.done {
			doneFiles += len(b.files)
		} else {
			resend++
		}
	}
	var todo []string
	for _, p := range paths {
		if !inBatch[p] {
			todo = append(todo, p)
		}
	}
	fmt.Fprintf(r.stderr, "%d files in %s: %d registered before, %d batches to resend, %d files to register\n",
		len(paths), r.dir, doneFiles, resend, len(todo))

	var bar *progressbar.ProgressBar
	if r.progress && len(todo) > 0 {
		var total int64
		for _, p := range todo {
			if st, err := os.Stat(filepath.Join(r.dir, filepath.FromSlash(p))); err == nil {
				total += st.Size()
			}
		}
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(r.stderr),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("B"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100_000_000),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(r.stderr) }),
		)
	}

	// Up to r.inFlight bulk requests are outstanding at once while the next batches are planned
	// and checksummed. A batch's "planned" line is synced before its request leaves (a crash from
	// then on resends it, same key and body); its "done" line is appended when the answer comes
	// and synced with the next "planned" lines. When a sync outlasts the requests in flight (a busy
	// disk), the batches described meanwhile are planned together, in one write and one sync (a
	// group commit); otherwise it is one sync per batch. Bounded: r.inFlight batches in flight, at most r.inFlight planned
	// and waiting for a slot, at most r.inFlight described and waiting to be planned, one in the
	// channel and one being checksummed.
	type answer struct {
		b   *batchState
		err error
	}
	answers := make(chan answer, r.inFlight)
	inFlight, sent := 0, 0
	var failed error
	take := func(a answer) error {
		inFlight--
		if a.err != nil {
			failed = errors.Join(failed, a.err)
			return nil
		}
		if bar != nil && !a.b.resent {
			sent += len(a.b.files)
			bar.Describe(fmt.Sprintf("%d/%d files", sent, len(todo)))
		}
		return sw.add(stateLine{Done: &a.b.n, TxID: a.b.txID, Status: a.b.stat})
	}

	// Batches planned by an earlier run but never acknowledged: the same key and body again, first.
	var planned, described []*batchState // planned: synced, waiting for a slot; described: waiting to be planned
	for _, b := range batches {
		if !b.done {
			b.resent = true
			planned = append(planned, b)
		}
	}

	// The describer checksums the batches in order, one ahead of the loop below (nothing of a
	// batch is written before it is planned, so a crash leaves the state file as a sequential run
	// would).
	type describedBatch struct {
		files []registerFile
		err   error
	}
	stop := make(chan struct{})
	defer close(stop)
	ahead := make(chan describedBatch, 1)
	go func() {
		defer close(ahead)
		sums := make([]*Checksummer, max(1, r.workers))
		for i := range sums {
			sums[i] = NewChecksummer()
			defer sums[i].Close()
		}
		for start := 0; start < len(todo); start += r.batch {
			files, err := r.describe(todo[start:min(start+r.batch, len(todo))], sums, bar)
			select {
			case ahead <- describedBatch{files, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	n := len(batches)
	in := ahead
	// accept takes the describer's next batch: the channel closed (all described) or its error
	// ends what is taken from it.
	accept := func(d describedBatch, ok bool) {
		switch {
		case !ok:
			in = nil
		case d.err != nil:
			failed = d.err
		default:
			described = append(described, &batchState{n: n, files: d.files, key: batchKey(d.files)})
			n++
		}
	}
	for failed == nil && (in != nil || len(described) > 0 || len(planned) > 0) {
		// Send what is planned while slots are free.
		for len(planned) > 0 && inFlight < r.inFlight {
			b := planned[0]
			planned = planned[1:]
			inFlight++
			go func() { answers <- answer{b, r.send(ctx, c, tok, b)} }()
		}
		// Take what the describer has ready (while a sync ran, it went on), then plan as much of
		// it as there is room for in one sync, with the answers taken so far.
	ready:
		for in != nil && failed == nil && len(described) < r.inFlight {
			select {
			case d, ok := <-in:
				accept(d, ok)
			default:
				break ready
			}
		}
		if failed != nil {
			break
		}
		if k := min(len(described), r.inFlight-len(planned)); k > 0 {
			for _, b := range described[:k] {
				sw.addPlanned(b)
			}
			if failed = sw.flush(true); failed != nil {
				break
			}
			planned = append(planned, described[:k]...)
			batches = append(batches, described[:k]...)
			described = described[k:]
			continue
		}
		// Wait for an answer or the next batch described.
		next := in
		if len(described) >= r.inFlight {
			next = nil
		}
		if next == nil && inFlight == 0 {
			// Nothing can arrive: the describer's channel closed during the take above while
			// no request was in flight. The loop's condition decides whether work is left.
			continue
		}
		select {
		case a := <-answers:
			if err := take(a); err != nil {
				failed = err
			}
		case d, ok := <-next:
			accept(d, ok)
		}
	}
	// The requests in flight are answered and their answers written, synced, error or not; the
	// batches planned but not sent are sent by the next run, like those whose answer was lost.
	for inFlight > 0 {
		if err := take(<-answers); err != nil && failed == nil {
			failed = err
		}
	}
	if err := sw.flush(true); err != nil && failed == nil {
		failed = err
	}
	if failed != nil {
		return batches, failed
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return batches, nil
}

// defaultStatePath is where a registration's state lives unless --state says: under
// $XDG_STATE_HOME/obsops/register (else ~/.local/state/...), one file per directory, execution
// and module.
func defaultStatePath(dir, execution string, module int64) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".local", "state")
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", abs, execution, module)))
	return filepath.Join(base, "obsops", "register", hex.EncodeToString(h[:8])+".jsonl"), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func defaultWorkers() int { return max(2, runtime.NumCPU()) }
