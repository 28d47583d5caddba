package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/pkg/service"
)

// MainProbeInterval is how often a secondary site's service checks that the main database
// answers (and how soon after it returns writes work again).
const MainProbeInterval = time.Second

// MainRetryAfter is the Retry-After (seconds) of a write refused because the main site is
// unreachable.
const MainRetryAfter = "5"

// ErrMainUnreachable is the error of a write that needs the main site's database while it does
// not answer (a secondary site with its WAN down): a 503 problem with Retry-After. Errors of the
// write pool caused by the link wrap it, so a handler that returns them, or finds it with
// errors.As, answers this problem. Reads, which use the local replica, are not affected.
var ErrMainUnreachable = problem.Unavailable.New("the main site is unreachable: this site cannot make this change now "+
	"(reads keep working, and buffered ingest writes are still accepted); retry later").WithHeader("Retry-After", MainRetryAfter)

// Pools are a service's two ways to PostgreSQL, the same code at either kind of site
// (docs/two-sites.md): Read is the local database (OPS_DATABASE_URL; at a secondary site its streaming read
// replica, so reads keep working while the WAN is down), Write is the main site's primary
// (OPS_MAIN_DATABASE_URL), where every write that is not buffered goes. At the main site Write
// is Read, one pool. Stores take both and use Write for statements that change rows (a hot
// standby refuses them with SQLSTATE 25006).
type Pools struct {
	Read  *sqlx.DB
	Write *sqlx.DB
	// Main tells whether Write answers. At a secondary site it is probed every
	// MainProbeInterval, and while it is down the write pool refuses at once with
	// ErrMainUnreachable; at the main site it is the local database, probed on demand (Probe).
	Main *MainLink
}

// AttachPools opens the pools of a service (see Pools) from the common settings: Read as Attach
// opens it (with the database and migration readiness checks, which at a secondary site are
// about the replica: an unreachable main never makes a service unready, its reads still work);
// at a secondary site Write on OPS_MAIN_DATABASE_URL with OPS_MAIN_DB_TIMEOUT on connecting and
// on every read and write of its connections, and the main link's probe running until the
// service closes its pools. The link's state is exported on reg as obsops_main_db_reachable and
// obsops_main_db_unreachable_seconds.
func AttachPools(svc *service.Service, expectedMigration int64) (*Pools, error) {
	read, err := Attach(svc, expectedMigration)
	if err != nil {
		return nil, err
	}
	c := svc.Common
	if !c.Secondary() {
		link := newMainLink(read.PingContext, c.MainDBTimeout, svc.Metrics, svc.Log)
		return &Pools{Read: read, Write: read, Main: link}, nil
	}
	if c.MainDatabaseURL == "" {
		_ = read.Close()
		return nil, &config.Invalid{Var: "OPS_MAIN_DATABASE_URL", Reason: "required at a secondary site (OPS_SITE_TYPE=secondary) for " + svc.Name +
			": the main site's primary (OPS_DATABASE_URL is the local replica)"}
	}
	link, write, err := OpenMain(c.MainDB(), c.DBMaxConns, c.MainDBTimeout, svc.Metrics, svc.Log)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	go link.Run(ctx)
	svc.OnClose("main database", func(context.Context) error {
		stop()
		link.close()
		return write.Close()
	})
	return &Pools{Read: read, Write: write, Main: link}, nil
}

// AttachLocalPools opens the pools of a service that makes no change in the main site's database
// from a secondary site (authtoken, catalog, site: decisions §45). At the main site it is AttachPools. At a
// secondary site Read is the local replica and Write is a pool that connects nowhere: every
// statement on it fails with WriteAtMainSite's problem (409 write_at_main_site naming the main
// site), so each write the service would make there is refused without any connection to the
// main (OPS_MAIN_DATABASE_URL is not read); Main is nil.
func AttachLocalPools(svc *service.Service, expectedMigration int64) (*Pools, error) {
	c := svc.Common
	if !c.Secondary() {
		return AttachPools(svc, expectedMigration)
	}
	read, err := Attach(svc, expectedMigration)
	if err != nil {
		return nil, err
	}
	write := RefusingPool(WriteAtMainSite(c.SiteName, c.MainSiteName))
	svc.OnClose("refused writes", func(context.Context) error { return write.Close() })
	return &Pools{Read: read, Write: write}, nil
}

// WriteAtMainSite is the problem of a change a secondary site (named site) does not make: 409
// urn:obsops:problem:write_at_main_site, naming the main site (main; empty: "the main site").
func WriteAtMainSite(site, main string) *problem.Problem {
	if main == "" {
		main = "the main site"
	} else {
		main = "the main site " + strconv.Quote(main)
	}
	return problem.WriteAtMainSite.New(fmt.Sprintf("this change is made at %s only: %q is a secondary site, "+
		"which reads its replica of the main's database and replays buffered ingest writes, and changes nothing else there; make it at %s",
		main, site, main))
}

// AtMainOnly reports whether err is (or wraps) the WriteAtMainSite problem: a change this
// secondary site does not make.
func AtMainOnly(err error) bool {
	var p *problem.Problem
	return errors.As(err, &p) && p.Kind() == problem.WriteAtMainSite
}

// RefusingPool is a pool whose every connection attempt fails with err: the write pool of a
// service that makes no change from where it runs.
func RefusingPool(err error) *sqlx.DB {
	return sqlx.NewDb(sql.OpenDB(refusingConnector{err: err}), "postgres")
}

type refusingConnector struct{ err error }

func (c refusingConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c refusingConnector) Driver() driver.Driver                        { return refusingDriver{c.err} }

type refusingDriver struct{ err error }

func (d refusingDriver) Open(string) (driver.Conn, error) { return nil, d.err }

// OpenMain opens a pool on the main site's database for a secondary site, with its link: every
// connection of the pool gives up after timeout without progress (connecting, or any read or
// write), and while the link is known down the pool refuses at once. The link's own probe uses a
// connection of its own. Call link.Run to keep the state current. Changes of state are logged to
// log (nil: not logged) and exported on reg (nil: not exported).
func OpenMain(dsn string, maxConns int, timeout time.Duration, reg prometheus.Registerer, log *slog.Logger) (*MainLink, *sqlx.DB, error) {
	probeConn, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, nil, &config.Invalid{Var: "OPS_MAIN_DATABASE_URL", Reason: err.Error()}
	}
	probeConn.Dialer(mainDialer{timeout: timeout})
	probeDB := sql.OpenDB(probeConn)
	probeDB.SetMaxOpenConns(1)
	probeDB.SetMaxIdleConns(1)
	link := newMainLink(probeDB.PingContext, timeout, reg, log)
	link.closers = append(link.closers, probeDB.Close)

	conn, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, nil, &config.Invalid{Var: "OPS_MAIN_DATABASE_URL", Reason: err.Error()}
	}
	conn.Dialer(mainDialer{timeout: timeout, link: link})
	db := sqlx.NewDb(sql.OpenDB(mainConnector{Connector: conn, link: link}), "postgres")
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	// Connections that sat idle across an outage are dead (the WAN dropped them): let them go
	// when the link goes down rather than fail the first writes after it returns.
	link.onDown = func() {
		db.SetMaxIdleConns(0)
		db.SetMaxIdleConns(maxConns)
	}
	return link, db, nil
}

// MainLink is this process's view of the main site's database: reachable or not, since when, and
// why not. Writes that fail for a network reason mark it down and make the probe check at once;
// the probe marks it up again.
type MainLink struct {
	probe   func(context.Context) error
	timeout time.Duration
	down    atomic.Bool // the fast path of every write-pool connection
	wake    chan struct{}
	onDown  func()
	closers []func() error
	log     *slog.Logger

	mu        sync.Mutex
	reachable bool
	since     time.Time
	lastErr   string
}

// MainStatus is a MainLink's state.
type MainStatus struct {
	Reachable bool      `json:"reachable" doc:"Whether the main site's database answered the last probe."`
	Since     time.Time `json:"since" doc:"Since when it has been (un)reachable, as seen by this process (its start if it never changed)."`
	// UnreachableSeconds is how long it has been unreachable; 0 while reachable.
	UnreachableSeconds float64 `json:"unreachable_seconds"`
	// LastError is the last probe or write failure (it may name addresses: not for anonymous
	// callers).
	LastError string `json:"last_error,omitempty"`
}

func newMainLink(probe func(context.Context) error, timeout time.Duration, reg prometheus.Registerer, log *slog.Logger) *MainLink {
	l := &MainLink{probe: probe, timeout: timeout, wake: make(chan struct{}, 1), reachable: true, since: time.Now(), log: log}
	if reg != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "obsops_main_db_reachable",
				Help: "Whether the main site's database answered this process's last probe (1) or not (0). Always 1 at the main site unless probed.",
			}, func() float64 {
				if l.Status().Reachable {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "obsops_main_db_unreachable_seconds",
				Help: "How long the main site's database has been unreachable from this process; 0 while reachable.",
			}, func() float64 { return l.Status().UnreachableSeconds }),
		)
	}
	return l
}

// Status returns the current state.
func (l *MainLink) Status() MainStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := MainStatus{Reachable: l.reachable, Since: l.since.UTC(), LastError: l.lastErr}
	if !l.reachable {
		s.UnreachableSeconds = time.Since(l.since).Seconds()
	}
	return s
}

// Reachable reports whether the main database is believed to answer (no probe is made).
func (l *MainLink) Reachable() bool { return !l.down.Load() }

// Probe checks the main database now (bounded by the link's timeout) and records the outcome.
func (l *MainLink) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := l.probe(ctx)
	l.record(err)
	return err
}

// Run probes every MainProbeInterval, and at once when a write failed, until ctx ends.
func (l *MainLink) Run(ctx context.Context) {
	t := time.NewTicker(MainProbeInterval)
	defer t.Stop()
	for {
		_ = l.Probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.wake:
		}
	}
}

// failed records a network failure of a write-pool connection: the link counts as down until
// the probe, asked to check at once, finds it answering.
func (l *MainLink) failed(err error) {
	l.record(err)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *MainLink) record(err error) {
	l.mu.Lock()
	reachable := err == nil
	changed := reachable != l.reachable
	was := time.Since(l.since)
	if changed {
		l.reachable, l.since = reachable, time.Now()
	}
	if err != nil {
		l.lastErr = err.Error()
	}
	l.down.Store(!reachable)
	onDown := l.onDown
	l.mu.Unlock()
	if !changed {
		return
	}
	if reachable {
		if l.log != nil {
			l.log.Info("main database reachable again; writes go through", "unreachable_for", was.Round(time.Millisecond).String())
		}
		return
	}
	if l.log != nil {
		l.log.Warn("main database unreachable; writes answer 503 until it is back", "error", err.Error())
	}
	if onDown != nil {
		onDown()
	}
}

func (l *MainLink) close() {
	for _, c := range l.closers {
		_ = c()
	}
}

// linkError is a network failure on the way to the main database. It unwraps to its cause and
// to ErrMainUnreachable; wrapped in a *net.OpError, lib/pq discards the connection and returns
// it as it is (no silent retry on another connection).
type linkError struct{ cause error }

func (e *linkError) Error() string   { return "main database unreachable: " + e.cause.Error() }
func (e *linkError) Unwrap() []error { return []error{e.cause, ErrMainUnreachable} }

func opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Err: &linkError{cause: err}}
}

// mainConnector refuses new connections at once while the link is known down.
type mainConnector struct {
	*pq.Connector
	link *MainLink
}

func (c mainConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if !c.link.Reachable() {
		return nil, ErrMainUnreachable
	}
	conn, err := c.Connector.Connect(ctx)
	var le *linkError
	if err != nil && !errors.As(err, &le) && isNetwork(err) {
		c.link.failed(err)
		return nil, opError("dial", err)
	}
	return conn, err
}

// isNetwork: the error says the server could not be reached or stopped answering (as opposed
// to a server's answer such as a refused password).
func isNetwork(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// DeadlineDialer is a lib/pq dialer whose connections must make progress within timeout on
// every read and write (and connect within it): for a pool that talks across a WAN link that may
// silently drop traffic (the ingest worker's), where a statement would otherwise wait forever.
func DeadlineDialer(timeout time.Duration) pq.Dialer { return mainDialer{timeout: timeout} }

// mainDialer connects with a timeout and gives connections a deadline on every read and write.
// With a link (the write pool), a failure marks the link down and reads and writes are refused
// at once while it is down; without (the probe's own connection), it only bounds the waits.
type mainDialer struct {
	timeout time.Duration
	link    *MainLink
}

func (d mainDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d mainDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d mainDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.link != nil && !d.link.Reachable() {
		return nil, opError("dial", errors.New("known down"))
	}
	nd := net.Dialer{Timeout: d.timeout, KeepAlive: 15 * time.Second}
	conn, err := nd.DialContext(ctx, network, address)
	if err != nil {
		if d.link != nil {
			d.link.failed(err)
			return nil, opError("dial", err)
		}
		return nil, err
	}
	return &deadlineConn{Conn: conn, timeout: d.timeout, link: d.link}, nil
}

// deadlineConn renews its deadline before every read and write: across a WAN that silently
// drops traffic a statement would otherwise wait forever for its answer (lib/pq's cancel request
// takes the same dead path).
type deadlineConn struct {
	net.Conn
	timeout time.Duration
	link    *MainLink
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	if c.link != nil && !c.link.Reachable() {
		return 0, opError("read", errors.New("known down"))
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Read(b)
	return n, c.failed("read", err)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	if c.link != nil && !c.link.Reachable() {
		return 0, opError("write", errors.New("known down"))
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Write(b)
	return n, c.failed("write", err)
}

// failed turns a write-pool connection's I/O error into a link failure.
func (c *deadlineConn) failed(op string, err error) error {
	if err == nil || c.link == nil {
		return err
	}
	c.link.failed(err)
	return opError(op, err)
}

// MainUnreachable reports whether err is (or wraps) ErrMainUnreachable.
func MainUnreachable(err error) bool { return errors.Is(err, ErrMainUnreachable) }
