package postgres

import (
	"context"
	"database/sql"
	"net"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/obsops/obsops/pkg/config"
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
	c.Dialer(deadlineDialer{timeout: ioTimeout})
	db := sqlx.NewDb(sql.OpenDB(c), "postgres")
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

type deadlineDialer struct{ timeout time.Duration }

func (d deadlineDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d deadlineDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d deadlineDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := net.Dialer{Timeout: d.timeout, KeepAlive: 15 * time.Second}
	conn, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: conn, timeout: d.timeout}, nil
}

// deadlineConn renews its deadline before every read and write.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(b)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(b)
}
