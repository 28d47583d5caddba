package postgres

import (
	"database/sql"
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
func OpenWorkerDB(dsn string, maxConns int, ioTimeout time.Duration) (*sqlx.DB, error) {
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
