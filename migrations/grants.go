package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lib/pq"
)

// RolePrefix begins every service's PostgreSQL role: obsops_authtoken, obsops_catalog, ...
const RolePrefix = "obsops_"

// ReplayRole is the one role a secondary site holds at the main site's database: its ingest's
// replay of buffered writes (grants/replay.sql, decisions §45). No other service of a secondary
// connects to the main.
const ReplayRole = RolePrefix + "replay"

// Role is the PostgreSQL role of a service (authtoken → obsops_authtoken).
func Role(service string) string { return RolePrefix + service }

// Services are the services that have a PostgreSQL role: one per file of grants/, in name order;
// "replay" among them is no binary but the role of a secondary's ingest at the main (ReplayRole).
func Services() []string {
	names, err := fs.Glob(grantFiles, "grants/*.sql")
	if err != nil {
		panic(fmt.Sprintf("migrations: embedded grants unreadable: %v", err))
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.TrimSuffix(path.Base(n), ".sql"))
	}
	return out
}

// ApplyGrants gives every service its role and exactly the privileges of its grants file
// (grants/<service>.sql, one GRANT per table; docs/operations.md, "Database roles"), and returns
// the files applied. In one transaction, holding the migrations' advisory lock: it creates the
// roles that are missing (roles belong to the cluster: several databases may create them at once,
// and a migration user without CREATEROLE works once an administrator has made them), revokes
// everything the roles hold on the schema's tables and sequences, and runs the files — so a line
// removed from a file is a privilege revoked, and the files are the whole truth.
//
// Like ApplyFunctions it applies them only at Latest: a file names the tables of the newest schema.
func ApplyGrants(ctx context.Context, db *sql.DB) ([]string, error) {
	names, err := fs.Glob(grantFiles, "grants/*.sql")
	if err != nil {
		return nil, err
	}
	applied, err := applyAtLatest(ctx, db, "grants", func(tx *sql.Tx) error {
		for _, service := range Services() {
			role := pq.QuoteIdentifier(Role(service))
			if _, err := tx.ExecContext(ctx, createRole(Role(service))); err != nil {
				return fmt.Errorf("grants: role %s: %w", Role(service), err)
			}
			if _, err := tx.ExecContext(ctx, `REVOKE ALL ON ALL TABLES IN SCHEMA public FROM `+role+`;
				REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM `+role); err != nil {
				return fmt.Errorf("grants: revoke from %s: %w", Role(service), err)
			}
		}
		return execFiles(ctx, tx, grantFiles, names)
	})
	if !applied {
		return nil, err
	}
	return names, err
}

// createRole is a statement that creates role (LOGIN, nothing more) unless it exists. Another
// database of the cluster may create it between the check and the CREATE: that is no error.
func createRole(role string) string {
	return fmt.Sprintf(`DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %[1]s) THEN
		BEGIN
			CREATE ROLE %[2]s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
		EXCEPTION
			WHEN duplicate_object OR unique_violation THEN NULL;
			WHEN insufficient_privilege THEN
				RAISE EXCEPTION 'role %% is missing and this user may not create roles: an administrator runs CREATE ROLE %% LOGIN, or migrate runs as a user with CREATEROLE', %[1]s, %[1]s;
		END;
	END IF;
END
$$`, pq.QuoteLiteral(role), pq.QuoteIdentifier(role))
}

// SetRolePasswords sets the password of every service's role that has a file in dir: dir/<service>
// holds the password (a Kubernetes Secret mounted as a directory; trailing newlines are dropped).
// Services without a file keep their password. It returns the services whose password was set.
// Setting a password needs CREATEROLE (or being a superuser); the statement is never logged.
func SetRolePasswords(ctx context.Context, db *sql.DB, dir string) ([]string, error) {
	var set []string
	for _, service := range Services() {
		b, err := os.ReadFile(filepath.Join(dir, service))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return set, fmt.Errorf("role password of %s: %w", service, err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if len(pw) < 16 {
			return set, fmt.Errorf("role password of %s (%s): must be at least 16 characters", service, filepath.Join(dir, service))
		}
		// ALTER ROLE takes no parameters: the password is quoted as a literal.
		if _, err := db.ExecContext(ctx, `ALTER ROLE `+pq.QuoteIdentifier(Role(service))+` PASSWORD `+pq.QuoteLiteral(pw)); err != nil {
			return set, fmt.Errorf("role password of %s: %w", service, err)
		}
		set = append(set, service)
	}
	return set, nil
}
