package postgres

import (
	"context"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/ingest"
)

// FinalizeHash fingerprints a finalize request (file ids in any order are the same request).
func FinalizeHash(f ingest.Finalize) string {
	ids := slices.Clone(f.FileIDs)
	slices.Sort(ids)
	f.FileIDs = ids
	return ingest.Hash(f)
}

// Finalize marks a package complete (immutable); a missing package is problem.ErrNotFound. buffered is the package's create still held in
// the buffer, applied first when the row does not exist yet (the worker's later apply is then a
// no-op). Finalizing a complete package again with the same request changes nothing (changed is
// false); with another, it is a *ingest.ConflictError.
// may (nil: any) is asked about the package's module under the lock; its refusal rolls back.
func (s *Store) Finalize(ctx context.Context, id string, f ingest.Finalize, buffered *ingest.PackageTask, may ingest.ModuleCheck) (row *ingest.PackageRow, changed bool, err error) {
	hash := FinalizeHash(f)
	err = database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if buffered != nil {
			if err := insertPackage(ctx, tx, buffered.Package, buffered.TxID); err != nil {
				return err
			}
		}
		var r pkgRow
		if err := tx.GetContext(ctx, &r, `SELECT `+pkgColumns+` FROM raw_data_packages WHERE id = $1 FOR UPDATE`, id); err != nil {
			if IsNoRows(err) {
				return problem.ErrNotFound
			}
			return err
		}
		if may != nil {
			if err := may(r.Module); err != nil {
				return err
			}
		}
		if r.Status == ingest.PackageComplete {
			if r.Hash.String != hash {
				return &ingest.ConflictError{Msg: "the package is already complete with another size, checksum or file list; a complete package cannot change"}
			}
			row = r.row(s.Status)
			return nil
		}
		if err := joinPackage(ctx, tx, id, f.FileIDs); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &r, `
UPDATE raw_data_packages SET status = 'complete', size_bytes = $2, checksum = $3, finalized_at = now(), finalize_hash = $4
WHERE id = $1 RETURNING `+pkgColumns, id, f.SizeBytes, f.Checksum, hash); err != nil {
			return err
		}
		row, changed = r.row(s.Status), true
		return nil
	})
	return row, changed, err
}

// UpdateFile changes a registered file. buffered is the file's registration still held in the
// buffer (applied first when the row does not exist yet). A file of a complete package cannot
// change, nor can a file join a complete package (*ingest.ConflictError).
// may (nil: any) is asked about the file's module under the lock; its refusal rolls back.
func (s *Store) UpdateFile(ctx context.Context, id string, u ingest.FileUpdate, buffered *ingest.FilesTask, may ingest.ModuleCheck) (*ingest.RawDataFile, error) {
	var out *ingest.RawDataFile
	err := database.InTx(ctx, s.writer(), func(tx *sqlx.Tx) error {
		if buffered != nil {
			if err := insertFiles(ctx, plainFilesExec(tx), []ingest.FilesTask{*buffered}, 0); err != nil {
				return err
			}
		}
		var r fileRow
		if err := tx.GetContext(ctx, &r, `SELECT `+fileColumns+` FROM raw_data_files f WHERE f.id = $1 FOR UPDATE OF f`, id); err != nil {
			if IsNoRows(err) {
				return problem.ErrNotFound
			}
			return err
		}
		if may != nil {
			if err := may(r.Module); err != nil {
				return err
			}
		}
		var pkgs []string
		if r.Package.Valid {
			pkgs = append(pkgs, r.Package.String)
		}
		if u.RawDataPackageID != nil {
			pkgs = append(pkgs, *u.RawDataPackageID)
		}
		if len(pkgs) > 0 {
			var complete []string
			if err := tx.SelectContext(ctx, &complete, `SELECT id::text FROM raw_data_packages WHERE id = ANY($1::uuid[]) AND status = 'complete' FOR SHARE`, pq.StringArray(pkgs)); err != nil {
				return err
			}
			if len(complete) > 0 {
				return &ingest.ConflictError{Msg: "raw data package " + complete[0] + " is complete: its files cannot change and no file can join it"}
			}
		}
		if u.RawDataPackageID != nil {
			if err := joinPackage(ctx, tx, *u.RawDataPackageID, []string{id}); err != nil {
				return err
			}
		}
		var meta []byte
		if u.Meta != nil {
			meta = u.Meta
		}
		if err := tx.GetContext(ctx, &r, `
UPDATE raw_data_files f SET size_bytes = COALESCE($2, size_bytes), checksum = COALESCE($3, checksum),
    meta = COALESCE($4::jsonb, meta)
WHERE f.id = $1 RETURNING `+fileColumns, id, u.SizeBytes, u.Checksum, meta); err != nil {
			return err
		}
		rec := r.record(s.Status)
		out = &rec
		return nil
	})
	return out, err
}

// joinPackage makes files members of package id (raw_data_package_files, one row per file: a
// file belongs to at most one package, whoever writes it). A file already in another package is
// a *ingest.ConflictError listing them, the transaction then rolled back by the caller.
func joinPackage(ctx context.Context, tx *sqlx.Tx, id string, files []string) error {
	if len(files) == 0 {
		return nil
	}
	var joined []string
	if err := tx.SelectContext(ctx, &joined, `INSERT INTO raw_data_package_files (file_id, package_id)
SELECT x, $1::uuid FROM unnest($2::uuid[]) AS x ON CONFLICT (file_id) DO NOTHING RETURNING file_id::text`, id, pq.StringArray(files)); err != nil {
		return err
	}
	if len(joined) == len(files) {
		return nil
	}
	// A statement of its own (a new snapshot), so that a membership a concurrent transaction
	// committed while the insert waited for it is seen.
	var taken []string
	if err := tx.SelectContext(ctx, &taken, `SELECT m.file_id::text || ' (in package ' || m.package_id || ')' FROM raw_data_package_files m
WHERE m.file_id = ANY($2::uuid[]) AND m.package_id <> $1::uuid ORDER BY m.file_id`, id, pq.StringArray(files)); err != nil {
		return err
	}
	if len(taken) > 0 {
		return &ingest.ConflictError{Msg: "a file belongs to at most one package; already in another package: " + strings.Join(taken, ", ")}
	}
	return nil
}
