package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
)

var bufferedView = view{columns: []string{"id", "transaction_id", "status", "count"}}

var receiptView = view{rows: "items", columns: []string{"transaction_id", "kind", "state", "attempts", "committed_at", "last_error"}}

func (a *App) ingestCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ingest", Short: "Instruments: observations, raw data files and packages (service account tokens)"}
	cmd.AddCommand(a.ingestStart(), a.ingestFinish(), a.ingestRegister(), a.ingestPackage(), a.ingestReceipts())
	return cmd
}

func idempotency(key string) *string {
	if key == "" {
		key = client.NewIdempotencyKey()
	}
	return &key
}

func (a *App) ingestStart() *cobra.Command {
	var obsUnit, module int64
	var start, id, key, site string
	cmd := &cobra.Command{
		Use: "start --obs-unit ID --module ID", Short: "Record the start of an observation (an executed obs unit)", Args: exactArgs(0),
		Example: "  obsops ingest start --obs-unit 12 --module 3\n  obsops ingest start --obs-unit 12 --module 3 --start-time 2026-12-01T23:10:00Z -o json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := api.StartRequest{ObsUnitId: obsUnit, InstrumentModuleId: &module}
			t := time.Now().UTC()
			if start != "" {
				var err error
				if t, err = time.Parse(time.RFC3339, start); err != nil {
					return usagef("--start-time must be RFC 3339, e.g. 2026-12-01T23:10:00Z")
				}
			}
			body.StartTime = &t
			if id != "" {
				u, err := uuid.Parse(id)
				if err != nil {
					return usagef("--id must be a UUID")
				}
				body.Id = &u
			}
			if site != "" {
				body.Site = &site
			}
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.StartExecutedObsUnitWithResponse(ctxOf(cmd), &api.StartExecutedObsUnitParams{IdempotencyKey: idempotency(key)}, body)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, bufferedView)
		},
	}
	cmd.Flags().Int64Var(&obsUnit, "obs-unit", 0, "the planned obs unit (required)")
	cmd.Flags().Int64Var(&module, "module", 0, "the instrument module (required)")
	cmd.Flags().StringVar(&start, "start-time", "", "when it started, RFC 3339 (default now)")
	cmd.Flags().StringVar(&id, "id", "", "the execution's id (UUID; default: chosen by the server)")
	cmd.Flags().StringVar(&site, "site", "", "the site it ran at")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "Idempotency-Key (default: a fresh one, kept for retries)")
	_ = cmd.MarkFlagRequired("obs-unit")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

func (a *App) ingestFinish() *cobra.Command {
	var end, status, key string
	cmd := &cobra.Command{
		Use: "finish EXECUTION_ID", Short: "Record the end of an observation", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := uuid.Parse(args[0]); err != nil {
				return usagef("EXECUTION_ID must be a UUID")
			}
			t := time.Now().UTC()
			if end != "" {
				var err error
				if t, err = time.Parse(time.RFC3339, end); err != nil {
					return usagef("--end-time must be RFC 3339")
				}
			}
			body := api.FinishRequest{EndTime: &t}
			if status != "" {
				s := api.FinishRequestStatus(status)
				body.Status = &s
			}
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.FinishExecutedObsUnitWithResponse(ctxOf(cmd), args[0], &api.FinishExecutedObsUnitParams{IdempotencyKey: idempotency(key)}, body)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, bufferedView)
		},
	}
	cmd.Flags().StringVar(&end, "end-time", "", "when it ended, RFC 3339 (default now)")
	cmd.Flags().StringVar(&status, "status", "completed", "completed, failed or aborted")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "Idempotency-Key (default: a fresh one, kept for retries)")
	return cmd
}

func (a *App) ingestRegister() *cobra.Command {
	r := &registration{}
	var noProgress, noReceipts bool
	cmd := &cobra.Command{
		Use:   "register DIR --execution ID --module ID",
		Short: "Register every file under DIR (checksums, bulk requests, resumable)",
		Long: "Walks DIR, computes each file's checksum (xxh64 or sha256, in parallel) and registers the files in bulk\n" +
			"requests of up to 1,000, each with client-chosen file ids (derived from execution, module and path) and an\n" +
			"Idempotency-Key; a few requests are in flight at once (--in-flight) while the next batch is checksummed.\n" +
			"A state file records each batch before it is sent and after it is acknowledged: run the same command again\n" +
			"after Ctrl-C or a crash and it resends unacknowledged batches unchanged (the API answers the original,\n" +
			"nothing is registered twice) and registers only the files in no batch. At the end it prints the receipt\n" +
			"of every batch (buffered, committed, ...).",
		Example: "  obsops ingest register /data/obs/2026-12-01 --execution 0193... --module 3\n" +
			"  obsops ingest register ./scan42 --execution 0193... --module 3 --checksum sha256 --package 0194...",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.dir, r.stderr = args[0], a.Stderr
			if _, err := uuid.Parse(r.execution); err != nil {
				return usagef("--execution must be the execution's UUID")
			}
			if r.pkg != "" {
				if _, err := uuid.Parse(r.pkg); err != nil {
					return usagef("--package must be a UUID")
				}
			}
			if r.algorithm != "xxh64" && r.algorithm != "sha256" {
				return usagef("--checksum must be xxh64 or sha256")
			}
			if r.batch < 1 || r.batch > MaxRegisterBatch {
				return usagef("--batch must be 1-%d", MaxRegisterBatch)
			}
			if r.inFlight < 1 || r.inFlight > MaxRegisterInFlight {
				return usagef("--in-flight must be 1-%d", MaxRegisterInFlight)
			}
			if st, err := os.Stat(r.dir); err != nil || !st.IsDir() {
				return fmt.Errorf("%s is not a directory", r.dir)
			}
			if r.statePath == "" {
				p, err := defaultStatePath(r.dir, r.execution, r.module)
				if err != nil {
					return err
				}
				r.statePath = p
			}
			r.progress = !noProgress && isTerminal(a.Stderr)
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			batches, runErr := r.run(ctxOf(cmd), c, tok)
			if runErr != nil {
				fmt.Fprintf(a.Stderr, "Stopped; run the same command again to register the rest (state: %s).\n", r.statePath)
				return runErr
			}
			files := 0
			for _, b := range batches {
				files += len(b.files)
			}
			fmt.Fprintf(a.Stderr, "%d files registered in %d batches (state: %s).\n", files, len(batches), r.statePath)
			if noReceipts {
				return nil
			}
			return a.batchReceipts(cmd, c, tok, batches)
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.execution, "execution", "", "the executed obs unit the files belong to (UUID, required)")
	f.Int64Var(&r.module, "module", 0, "the instrument module (required)")
	f.StringVar(&r.pkg, "package", "", "a raw data package (UUID) the files join")
	f.StringVar(&r.algorithm, "checksum", "xxh64", "xxh64 or sha256")
	f.IntVar(&r.batch, "batch", MaxRegisterBatch, "files per bulk request (at most 1,000)")
	f.IntVar(&r.workers, "workers", defaultWorkers(), "files checksummed in parallel")
	f.IntVar(&r.inFlight, "in-flight", DefaultRegisterInFlight, fmt.Sprintf("bulk requests outstanding at once (1-%d)", MaxRegisterInFlight))
	f.StringVar(&r.statePath, "state", "", "the state file (default under $XDG_STATE_HOME/obsops/register/)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar (it is shown only on a terminal anyway)")
	f.BoolVar(&noReceipts, "no-receipts", false, "do not fetch and print the receipts at the end")
	_ = cmd.MarkFlagRequired("execution")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

// batchReceipts fetches and shows the receipt of each batch.
func (a *App) batchReceipts(cmd *cobra.Command, c *client.Client, tok string, batches []*batchState) error {
	items := make([]json.RawMessage, 0, len(batches))
	for _, b := range batches {
		if b.txID == "" {
			continue
		}
		resp, err := c.API.GetIngestTransactionWithResponse(ctxOf(cmd), b.txID)
		if err := checkResp(tok, resp, err); err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(resp.Body, &m); err != nil {
			return err
		}
		m["files"] = len(b.files)
		m["batch"] = b.n
		raw, _ := json.Marshal(m)
		items = append(items, raw)
	}
	body, _ := json.Marshal(map[string]any{"items": items})
	return a.show(body, view{rows: "items", columns: []string{"batch", "files", "transaction_id", "state", "committed_at"}})
}

func (a *App) ingestReceipts() *cobra.Command {
	return &cobra.Command{
		Use: "receipts TRANSACTION_ID...", Short: "Where buffered writes are: buffered, applying, committed, retrying, dead", Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			items := make([]json.RawMessage, 0, len(args))
			for _, id := range args {
				resp, err := c.API.GetIngestTransactionWithResponse(ctxOf(cmd), id)
				if err := checkResp(tok, resp, err); err != nil {
					return err
				}
				items = append(items, resp.Body)
			}
			body, _ := json.Marshal(map[string]any{"items": items})
			return a.show(body, receiptView)
		},
	}
}

// readIDs reads file ids from flags and a file of one id per line.
func readIDs(ids []string, file string) ([]string, error) {
	if file == "" {
		return ids, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			ids = append(ids, s)
		}
	}
	return ids, sc.Err()
}

func (a *App) ingestPackage() *cobra.Command {
	cmd := &cobra.Command{Use: "package", Short: "Raw data packages (one tar per execution and module)"}
	var execution, name, id, key, idsFile string
	var module int64
	var ids []string
	create := &cobra.Command{
		Use: "create --execution ID --module ID --name NAME", Short: "Create a package (status building)", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			eu, err := uuid.Parse(execution)
			if err != nil {
				return usagef("--execution must be a UUID")
			}
			all, err := readIDs(ids, idsFile)
			if err != nil {
				return err
			}
			body := api.PackageRequest{ExecutedObsUnitId: &eu, InstrumentModuleId: module, Name: &name}
			if len(all) > 0 {
				body.FileIds = &all
			}
			if id != "" {
				u, err := uuid.Parse(id)
				if err != nil {
					return usagef("--id must be a UUID")
				}
				body.Id = &u
			}
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.CreateRawDataPackageWithResponse(ctxOf(cmd), &api.CreateRawDataPackageParams{IdempotencyKey: idempotency(key)}, body)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, bufferedView)
		},
	}
	create.Flags().StringVar(&execution, "execution", "", "the executed obs unit (UUID, required)")
	create.Flags().Int64Var(&module, "module", 0, "the instrument module (required)")
	create.Flags().StringVar(&name, "name", "", "the package's name, e.g. its tar file (required)")
	create.Flags().StringVar(&id, "id", "", "the package's id (UUID; default: chosen by the server)")
	create.Flags().StringArrayVar(&ids, "file-id", nil, "a registered file that joins it (repeat)")
	create.Flags().StringVar(&idsFile, "file-ids-from", "", "a file of file ids, one a line")
	create.Flags().StringVar(&key, "idempotency-key", "", "Idempotency-Key (default: a fresh one, kept for retries)")
	for _, f := range []string{"execution", "module", "name"} {
		_ = create.MarkFlagRequired(f)
	}

	var size int64
	var sum string
	var fids []string
	var fidsFile string
	finalize := &cobra.Command{
		Use: "finalize PACKAGE_ID --size BYTES --checksum ALG:HEX", Short: "Mark a package complete (it enters the transfer pipeline)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := readIDs(fids, fidsFile)
			if err != nil {
				return err
			}
			body := api.FinalizeRequest{SizeBytes: size, Checksum: &sum}
			if len(all) > 0 {
				body.FileIds = &all
			}
			c, tok, err := a.client(true)
			if err != nil {
				return err
			}
			resp, err := c.API.FinalizeRawDataPackageWithResponse(ctxOf(cmd), args[0], body)
			if err := checkResp(tok, resp, err); err != nil {
				return err
			}
			return a.show(resp.Body, view{columns: []string{"id", "name", "status", "size_bytes", "checksum"}})
		},
	}
	finalize.Flags().Int64Var(&size, "size", 0, "the package's size in bytes (required)")
	finalize.Flags().StringVar(&sum, "checksum", "", "the package's checksum, xxh64:<hex> or sha256:<hex> (required)")
	finalize.Flags().StringArrayVar(&fids, "file-id", nil, "a file that joins it now (repeat)")
	finalize.Flags().StringVar(&fidsFile, "file-ids-from", "", "a file of file ids, one a line")
	_ = finalize.MarkFlagRequired("size")
	_ = finalize.MarkFlagRequired("checksum")
	cmd.AddCommand(create, finalize)
	return cmd
}
