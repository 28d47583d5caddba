package postgres

import (
	"database/sql"
	"net/url"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/database"
)

// OpenWorkerDB opens the worker's pool on the main database. Every socket read and write must
// make progress within ioTimeout: across a WAN link that silently drops traffic a query would
// otherwise wait forever for an answer that never comes (lib/pq's cancel request takes the same
// dead path), keeping its pool connection, until the worker can apply nothing even after the
// link heals. With the deadline the connection fails, is discarded, and the task is retried on a
// fresh one. No statement of the worker legitimately runs that long.
//
// originSite, set by a secondary site's worker (its OPS_SITE_NAME), is sent as the connection
// setting obsops.origin_site: the main database then lists the files it inserts for the main's
// committed filter (migration 00031, buffer/committed.go).
func OpenWorkerDB(dsn string, maxConns int, ioTimeout time.Duration, originSite string) (*sqlx.DB, error) {
	if originSite != "" {
		var err error
		if dsn, err = withSetting(dsn, "obsops.origin_site", originSite); err != nil {
			return nil, &config.Invalid{Var: "OPS_MAIN_DATABASE_URL", Reason: err.Error()}
		}
	}
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, &config.Invalid{Var: "OPS_MAIN_DATABASE_URL", Reason: err.Error()}
	}
	c.Dialer(database.DeadlineDialer(ioTimeout))
	db := sqlx.NewDb(sql.OpenDB(c), "postgres")
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// withSetting adds a run-time setting to a connection string (URL or key=value form): lib/pq
// sends the parameters it does not know in the startup message, as settings of the session.
func withSetting(dsn, name, value string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set(name, value)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " " + name + "='" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(value) + "'", nil
}
