// Package admin holds the ingest service's operator commands (`ingest admin ...`): the dead
// letters of the buffer — tasks that can never apply, kept with their error — listed, retried
// after a fix, or dropped; the records left without a link (orphans); and the database's
// invariants checked (check, an operator's fsck).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
	"github.com/obsops/obsops/services/ingest/postgres"
	"github.com/obsops/obsops/services/ingest/worker"
)

const usage = `usage: ingest admin check [--limit N]
       ingest admin orphans [--limit N]
       ingest admin dead-letters list [--limit N]
       ingest admin dead-letters retry (--id TASK_ID | --all)
       ingest admin dead-letters drop  (--id TASK_ID | --all)`

// DeadLetter is one archived task as listed (one JSON object per line).
type DeadLetter = ingest.DeadLetter

// Run executes one admin command with cfg's Redis.
func Run(ctx context.Context, cfg *ingest.Config, args []string, stdout, stderr io.Writer) error {
	if len(args) >= 1 && args[0] == "orphans" {
		return orphans(ctx, cfg, args[1:], stdout, stderr)
	}
	if len(args) >= 1 && args[0] == "check" {
		return check(ctx, cfg, args[1:], stdout, stderr)
	}
	if len(args) < 2 || args[0] != "dead-letters" {
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown admin command")
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return &config.Invalid{Var: "OPS_REDIS_URL", Reason: err.Error()}
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	fs := flag.NewFlagSet("dead-letters "+args[1], flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 100, "list at most this many")
	id := fs.String("id", "", "the task id (from list)")
	all := fs.Bool("all", false, "every dead letter")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	switch args[1] {
	case "list":
		return list(insp, *limit, stdout)
	case "retry", "drop":
		if (*id == "") == !*all {
			fmt.Fprintln(stderr, usage)
			return errors.New("give exactly one of --id or --all")
		}
		return act(ctx, insp, buffer.New(rdb, 5*time.Second), args[1], *id, stdout)
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown dead-letters command %q", args[1])
}

func list(insp *asynq.Inspector, limit int, out io.Writer) error {
	tasks, err := insp.ListArchivedTasks(ingest.Queue, asynq.PageSize(max(limit, 1)))
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return err
	}
	enc := json.NewEncoder(out)
	for _, t := range tasks {
		if err := enc.Encode(deadLetter(t)); err != nil {
			return err
		}
	}
	return nil
}

// deadLetter is archived task t as the command and the API show it.
func deadLetter(t *asynq.TaskInfo) DeadLetter {
	var env struct{ ingest.Envelope }
	_ = json.Unmarshal(t.Payload, &env)
	return DeadLetter{TaskID: t.ID, Type: t.Type, TransactionID: env.TxID, Error: t.LastErr,
		FailedAt: t.LastFailedAt.UTC(), Retried: t.Retried}
}

func act(ctx context.Context, insp *asynq.Inspector, buf *buffer.Buffer, verb, id string, out io.Writer) error {
	var n int
	var err error
	switch {
	case verb == "retry" && id == "":
		n, err = insp.RunAllArchivedTasks(ingest.Queue)
	case verb == "retry":
		err, n = insp.RunTask(ingest.Queue, id), 1
	case id == "":
		n, err = dropAll(ctx, insp, buf)
	default:
		var t *asynq.TaskInfo
		if t, err = insp.GetTaskInfo(ingest.Queue, id); err == nil {
			err, n = drop(ctx, insp, buf, t), 1
		}
	}
	if errors.Is(err, asynq.ErrQueueNotFound) {
		err, n = nil, 0
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, id, err)
	}
	past := map[string]string{"retry": "requeued", "drop": "dropped"}[verb]
	fmt.Fprintf(out, "%d dead letter(s) %s\n", n, past)
	return nil
}

// dropAll drops every dead letter, a page at a time; it returns how many it dropped.
func dropAll(ctx context.Context, insp *asynq.Inspector, buf *buffer.Buffer) (int, error) {
	n := 0
	for {
		tasks, err := insp.ListArchivedTasks(ingest.Queue, asynq.PageSize(100))
		if err != nil || len(tasks) == 0 {
			return n, err
		}
		for _, t := range tasks {
			if err := drop(ctx, insp, buf, t); err != nil {
				return n, err
			}
			n++
		}
	}
}

// drop deletes task t after taking its records out of the read cache: its write will never
// apply, so the reads must stop answering it as buffered. A crash in between leaves the task, to
// be dropped again; a payload too broken to name its records leaves nothing to take out.
func drop(ctx context.Context, insp *asynq.Inspector, buf *buffer.Buffer, t *asynq.TaskInfo) error {
	if t.State == asynq.TaskStateActive {
		return errors.New("the task is being applied right now; it cannot be dropped")
	}
	if items, err := worker.Records(t.Type, t.Payload); err == nil {
		if err := buf.Forget(ctx, items); err != nil {
			return fmt.Errorf("take its records out of the read cache: %w", err)
		}
	}
	return insp.DeleteTask(ingest.Queue, t.ID)
}

// orphans prints, one JSON object per line, the records whose link to another buffered record
// leads nowhere: files or packages of an unknown execution, files naming an unknown package,
// executions finished but never started. Right after an outage some are normal (the rest of
// their writes are still buffered); those that stay point at a client that never sent them.
func orphans(ctx context.Context, cfg *ingest.Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("orphans", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 1000, "list at most this many of each kind")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return &config.Invalid{Var: "OPS_DATABASE_URL", Reason: "required but not set"}
	}
	db, err := database.Open(cfg.MainDB(), 1)
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := (&postgres.Store{DB: db}).Orphans(ctx, max(*limit, 1))
	if err != nil {
		return fmt.Errorf("list orphans: %w", err)
	}
	enc := json.NewEncoder(stdout)
	for _, o := range list {
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	return nil
}

// ErrInvariantsViolated is check's error when the database breaks an invariant (the command
// exits 1); the violations are on stdout.
var ErrInvariantsViolated = errors.New("invariants violated")

// check runs every invariant of migrations/invariants over the main database (read-only, one
// snapshot) and prints the violations grouped by invariant, each with its description and then
// one line per offending record: its id and what is wrong. With none it prints one line saying
// how many invariants hold.
func check(ctx context.Context, cfg *ingest.Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 100, "print at most this many violations of each invariant")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return &config.Invalid{Var: "OPS_DATABASE_URL", Reason: "required but not set"}
	}
	invs, err := migrations.Invariants()
	if err != nil {
		return err
	}
	db, err := database.Open(cfg.MainDB(), 1)
	if err != nil {
		return err
	}
	defer db.Close()
	found, err := migrations.CheckInvariants(ctx, db.DB)
	if err != nil {
		return fmt.Errorf("check invariants: %w", err)
	}
	if len(found) == 0 {
		fmt.Fprintf(stdout, "all %d invariants hold\n", len(invs))
		return nil
	}
	broken := 0
	for i := 0; i < len(found); {
		j := i
		for j < len(found) && found[j].Invariant == found[i].Invariant {
			j++
		}
		broken++
		fmt.Fprintf(stdout, "%s: %d violation(s): %s\n", found[i].Invariant, j-i, found[i].Description)
		for k, v := range found[i:j] {
			if k == max(*limit, 1) {
				fmt.Fprintf(stdout, "  … and %d more\n", j-i-k)
				break
			}
			fmt.Fprintf(stdout, "  %s  %s\n", v.ID, v.Detail)
		}
		i = j
	}
	fmt.Fprintf(stdout, "%d of %d invariants violated, %d violation(s)\n", broken, len(invs), len(found))
	return fmt.Errorf("%w: %d of %d (see above)", ErrInvariantsViolated, broken, len(invs))
}
