package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/services/ingest"
)

// Work is one task for ApplyBatch: exactly one of its fields is set.
type Work struct {
	Start   *ingest.StartTask
	Finish  *ingest.FinishTask
	Files   *ingest.FilesTask
	Package *ingest.PackageTask
}

// Rows is how many rows the work writes.
func (w Work) Rows() int {
	if w.Files != nil {
		return len(w.Files.Files)
	}
	return 1
}

// ApplyBatch applies several tasks in one transaction: every file of every task in one
// INSERT … SELECT unnest per BatchRows rows, the other records one upsert each. A backlog
// (a secondary site after a WAN outage) then drains at the bulk rate, one commit for many tasks,
// instead of one commit — and over a WAN several round trips — per task. The statements are the
// same upserts as the single-task Apply* methods, so a batch applied twice, or tasks of one batch
// applied again in another, change nothing.
func (a *Applier) ApplyBatch(ctx context.Context, works []Work) (ingest.Commit, error) {
	c, err := a.applyBatch(ctx, works, false)
	if errors.Is(err, errFileExists) {
		// Rolled back as a whole (or one statement that wrote nothing): again, as upserts.
		return a.applyBatch(ctx, works, true)
	}
	return c, err
}

// applyBatch is ApplyBatch with files inserted as new (errFileExists if one is not) or upserted.
func (a *Applier) applyBatch(ctx context.Context, works []Work, upsert bool) (ingest.Commit, error) {
	if a.RefuseCollisions {
		return a.inTx(ctx, func(tx *sqlx.Tx) error {
			if err := a.apply(ctx, tx, works, upsert); err != nil {
				return err
			}
			return refuseCollisions(ctx, tx, works)
		})
	}
	if oneStatement(works, a.batchRows()) {
		// One statement commits by itself: one round trip instead of three (BEGIN, the statement,
		// COMMIT) — what a worker that keeps up applies most: a single file's registration, or
		// the files of the registrations held in one round (ingest.TaskWrites).
		return a.alone(ctx, func() error { return a.apply(ctx, nil, works, upsert) })
	}
	return a.inTx(ctx, func(tx *sqlx.Tx) error { return a.apply(ctx, tx, works, upsert) })
}

// oneStatement reports whether works are applied by one statement: a single record, or files
// only, at most batch rows of them (insertFiles writes them in one INSERT).
func oneStatement(works []Work, batch int) bool {
	if len(works) == 1 && works[0].Files == nil {
		return true
	}
	rows := 0
	for _, w := range works {
		if w.Files == nil {
			return false
		}
		rows += w.Rows()
	}
	return rows <= batch
}

// apply runs the statements of works on tx (nil: on the pool, for a single statement).
func (a *Applier) apply(ctx context.Context, tx *sqlx.Tx, works []Work, upsert bool) error {
	var q sqlx.ExecerContext = a.DB
	if tx != nil {
		q = tx
	}
	var files []ingest.FilesTask
	for _, w := range works {
		var err error
		switch {
		case w.Start != nil:
			err = execStart(ctx, q, *w.Start)
		case w.Finish != nil:
			err = execFinish(ctx, q, *w.Finish)
		case w.Package != nil:
			err = insertPackage(ctx, q, w.Package.Package, w.Package.TxID)
		case w.Files != nil:
			files = append(files, *w.Files)
		}
		if err != nil {
			return err
		}
	}
	if len(files) == 0 {
		return nil
	}
	exec, err := a.filesExec(ctx, tx, upsert)
	if err != nil {
		return err
	}
	return insertFiles(ctx, exec, files, a.batchRows())
}

// refuseCollisions fails (a *ingest.PermanentError, the transaction rolled back) when applying
// works recorded a collision: with buffering disabled the write is answered only now, so a path,
// file or package name a concurrent write took is refused (409) rather than kept aside.
func refuseCollisions(ctx context.Context, tx *sqlx.Tx, works []Work) error {
	var txs []string
	for _, w := range works {
		switch {
		case w.Files != nil:
			txs = append(txs, w.Files.TxID)
		case w.Package != nil:
			txs = append(txs, w.Package.TxID)
		}
	}
	if len(txs) == 0 {
		return nil
	}
	var details []string
	if err := tx.SelectContext(ctx, &details, `SELECT detail FROM ingest_collisions WHERE tx = ANY($1::uuid[]) ORDER BY id`, pq.StringArray(txs)); err != nil {
		return err
	}
	if len(details) > 0 {
		return &ingest.PermanentError{Err: errors.New(strings.Join(details, "; "))}
	}
	return nil
}
