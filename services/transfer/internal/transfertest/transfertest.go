// Package transfertest sets up the real parts transfer tests run against: a fresh migrated
// PostgreSQL database, a private Redis, the service's parts built on them by app.NewCore (as
// cmd/transfer builds them), and finalized raw data packages as ingest leaves them.
package transfertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/app"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// Env is one test's database and Redis with the service's parts on them (Store, Claimer,
// Completer, Reconciler, Planner, Waker, Hub, Service, Config: see app.Core).
type Env struct {
	DatabaseURL string
	DB          *sqlx.DB
	Redis       *testenv.RedisServer
	RDB         *redis.Client
	*app.Core
}

// Config is the configuration tests run with: quick retries, small DTPs, short intervals.
func Config() *transfer.Config {
	return &transfer.Config{
		DTPTargetBytes: 3000, DTPMaxWait: time.Hour, OperationLease: time.Minute, MaxRetries: 3,
		RetryBackoff: 200 * time.Millisecond, RetryBackoffMax: time.Second, PlannerInterval: 100 * time.Millisecond,
		SweepInterval: time.Hour, OverviewInterval: 250 * time.Millisecond, WSHeartbeat: 15 * time.Second, WSMaxPerUser: 8,
	}
}

// New starts a database and a Redis for t.
func New(t testing.TB) *Env {
	t.Helper()
	return NewOn(t, testenv.Database(t), testenv.Redis(t))
}

// NewOn builds the service's parts on an existing database and Redis (e.g. a suite's).
func NewOn(t testing.TB, databaseURL string, rs *testenv.RedisServer) *Env {
	t.Helper()
	e := &Env{DatabaseURL: databaseURL, Redis: rs}
	db, err := database.Open(e.DatabaseURL, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.DB = db
	e.RDB = e.Redis.Client()
	e.Core = app.NewCore(Config(), app.Parts{DB: db, Redis: e.RDB, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return e
}

// PackageChecksum is the checksum AddPackages registers for every package; DTPChecksum the one
// Report gives a data_transfer_package operation (its DTP's registration).
const (
	PackageChecksum = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	DTPChecksum     = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	// WrongChecksum matches no registration.
	WrongChecksum = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// Report returns what an honest mover reports completing op: the size and checksum registered
// for what it verifies against (transfer.VerifiedAgainst: the package's, or the DTP's as its
// data_transfer_package operation registered it), and for the other kinds DTPChecksum with 100
// bytes.
func Report(t testing.TB, db *sqlx.DB, op transfer.Operation) (int64, string) {
	t.Helper()
	size, sum, err := Registered(context.Background(), db, op)
	if err != nil {
		t.Fatalf("registration of operation %d: %v", op.ID, err)
	}
	return size, sum
}

// Registered is Report without a testing.TB, for movers running in goroutines.
func Registered(ctx context.Context, db *sqlx.DB, op transfer.Operation) (int64, string, error) {
	var reg struct {
		Sum   *string `db:"checksum"`
		Bytes *int64  `db:"bytes"`
	}
	var err error
	switch transfer.VerifiedAgainst(op.Kind) {
	case "package":
		err = db.GetContext(ctx, &reg, `SELECT checksum, size_bytes AS bytes FROM raw_data_packages WHERE id = $1`, *op.RawDataPackageID)
	case "dtp":
		err = db.GetContext(ctx, &reg, `SELECT checksum, built_size_bytes AS bytes FROM data_transfer_packages WHERE id = $1`, *op.DataTransferPackageID)
	}
	if err != nil {
		return 0, "", err
	}
	if reg.Sum == nil || reg.Bytes == nil {
		return 100, DTPChecksum, nil
	}
	return *reg.Bytes, *reg.Sum, nil
}

// AddPackages inserts n raw data packages of size bytes with the given status ("complete":
// finalized) and returns their ids.
func AddPackages(t testing.TB, db *sqlx.DB, n int, size int64, status string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	var module int // an instrument module of the catalog's reference data
	if err := db.Get(&module, `SELECT min(id) FROM instrument_modules`); err != nil {
		t.Fatalf("instrument module: %v", err)
	}
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		if _, err := db.Exec(`INSERT INTO raw_data_packages (id, executed_obs_unit_id, status, size_bytes, checksum, name, instrument_module_id, finalized_at)
			VALUES ($1, $2, $3, $4, $7, $5, $6, CASE WHEN $3 = 'complete' THEN now() END)`,
			ids[i], uuid.New(), status, size, fmt.Sprintf("pkg-%d-%s", i, ids[i].String()[:8]), module, PackageChecksum); err != nil {
			t.Fatalf("insert raw data package: %v", err)
		}
	}
	return ids
}

// Round runs one planner round.
func (e *Env) Round(t testing.TB) {
	t.Helper()
	e.Planner.RunOnce(context.Background())
}

// State returns a package's stored lifecycle state.
func (e *Env) State(t testing.TB, id uuid.UUID) string {
	t.Helper()
	var s string
	if err := e.DB.Get(&s, `SELECT state FROM package_states WHERE raw_data_package_id = $1`, id); err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	return s
}

// DriveAll claims and completes every due operation of kinds as mover until none is left,
// running a planner round after each pass; it returns how many it completed. Work has run out
// when nothing is claimable and no completed operation waits for its successors: a service's
// own planner (woken by a test's HTTP requests) may hold completed operations while this
// round runs (the rounds skip what the other locks) and create their successors a moment later.
func (e *Env) DriveAll(t testing.TB, mover string, kinds ...transfer.Kind) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ops, err := e.Store.Claim(ctx, mover, kinds, "", 100)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		for _, op := range ops {
			var copies []transfer.Copy
			if op.Kind == transfer.KindLongTermArchive && op.Destination != nil {
				copies = []transfer.Copy{{Location: *op.Destination, Path: fmt.Sprintf("%s/%d", op.Kind, op.ID)}}
			}
			size, sum := Report(t, e.DB, op)
			if _, err := e.Store.Complete(ctx, op.ID, mover, size, sum, copies); err != nil {
				t.Fatalf("complete %d: %v", op.ID, err)
			}
			n++
		}
		e.Round(t)
		if len(ops) == 0 {
			var unadvanced int
			if err := e.DB.Get(&unadvanced, `SELECT count(*) FROM operations WHERE status = 'COMPLETED' AND NOT advanced AND kind IN `+postgres.SuccessorKinds); err != nil {
				t.Fatalf("unadvanced operations: %v", err)
			}
			if unadvanced == 0 {
				return n
			}
			time.Sleep(20 * time.Millisecond) // another planner's round holds them
		}
	}
	t.Fatal("DriveAll: work did not run out")
	return n
}
