package transfer_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"
)

// cpuMeter measures the CPU time the parts of one suite spend (Linux /proc): its service
// processes (found by their environment naming the suite's database), the PostgreSQL backends
// of that database, and this test process. On a machine shared with other work the wall-clock
// rates are noisy; CPU time per operation is not, so the benchmarks print both.
type cpuMeter struct {
	db     *sqlx.DB
	dbURL  string
	start  map[string]time.Duration
	xacts0 int64
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on every Linux we run on).
const clockTick = 100

// procCPU is utime+stime of pid.
func procCPU(pid string) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / clockTick, true
}

func (m *cpuMeter) sample() map[string]time.Duration {
	out := map[string]time.Duration{}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		env, err := os.ReadFile(p + "/environ")
		if err != nil || !bytes.Contains(env, []byte("OPS_DATABASE_URL="+m.dbURL+"\x00")) {
			continue
		}
		cmd, _ := os.ReadFile(p + "/cmdline")
		name := filepath.Base(string(bytes.SplitN(cmd, []byte{0}, 2)[0]))
		if d, ok := procCPU(filepath.Base(p)); ok {
			out[name] += d
		}
	}
	var backends []int
	_ = m.db.Select(&backends, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	for _, pid := range backends {
		if d, ok := procCPU(strconv.Itoa(pid)); ok {
			out["postgres"] += d
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out["test"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return out
}

func (m *cpuMeter) xacts() int64 {
	var n int64
	_ = m.db.Get(&n, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`)
	return n
}

// startCPU begins a measurement over the suite using database dbURL.
func startCPU(db *sqlx.DB, dbURL string) *cpuMeter {
	m := &cpuMeter{db: db, dbURL: dbURL}
	m.start = m.sample()
	m.xacts0 = m.xacts()
	return m
}

// perOp reports the CPU time per unit (an operation, a message) of each part since startCPU and
// the database transactions per unit (pg_stat_database, flushed by PostgreSQL within about a second:
// read after the work, the figure is a close upper bound). Backends that closed meanwhile are not
// counted (the pools keep theirs open).
func (m *cpuMeter) perOp(ops int64, unit string) string {
	if ops == 0 {
		return "no operations"
	}
	end := m.sample()
	time.Sleep(time.Second) // PostgreSQL publishes its statistics at most once a second
	x := m.xacts() - m.xacts0
	var parts []string
	var total time.Duration
	for _, name := range []string{"postgres", "transfer", "authtoken", "gateway", "test"} {
		d := end[name] - m.start[name]
		if _, ok := end[name]; !ok || d < 0 {
			continue
		}
		total += d
		parts = append(parts, fmt.Sprintf("%s %.0fµs", name, float64(d.Microseconds())/float64(ops)))
	}
	return fmt.Sprintf("CPU per %s %.0fµs (%s); database transactions per %s %.2f",
		unit, float64(total.Microseconds())/float64(ops), strings.Join(parts, ", "), unit, float64(x)/float64(ops))
}
