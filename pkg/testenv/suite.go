package testenv

import (
	"strings"
	"testing"
	"time"
)

// SuiteServices are the binaries of the suite, in start order (the gateway last).
func SuiteServices() []string {
	return []string{"authtoken", "transfer", "catalog", "ingest", "site", "gateway"}
}

// Suite is the whole obsops suite running from its real binaries against one database and one
// Redis, with the gateway in front.
type Suite struct {
	GatewayURL  string
	DatabaseURL string
	Redis       *RedisServer
	URLs        map[string]string   // service name -> base URL
	Procs       map[string]*Process // service name -> process
	Env         map[string]string   // the OPS_* environment every process got
}

// SuiteOptions adjust the suite; Env entries override the defaults for every process.
type SuiteOptions struct {
	Env  map[string]string
	Skip []string // services not to start (their URL still points at a free port)
}

// StartSuite starts every service and the gateway and waits until each is ready.
func StartSuite(t testing.TB, opts SuiteOptions) *Suite {
	t.Helper()
	s := &Suite{
		DatabaseURL: Database(t),
		Redis:       Redis(t),
		URLs:        map[string]string{},
		Procs:       map[string]*Process{},
	}
	s.Env = map[string]string{
		"OPS_DATABASE_URL":     s.DatabaseURL,
		"OPS_REDIS_URL":        s.Redis.URL,
		"OPS_SHUTDOWN_DRAIN":   "0s",
		"OPS_SHUTDOWN_TIMEOUT": "5s",
		"OPS_LOG_LEVEL":        "info",
	}
	for _, name := range SuiteServices() {
		addr := FreeAddr(t)
		upper := strings.ToUpper(name)
		s.Env["OPS_"+upper+"_ADDR"] = addr
		s.URLs[name] = "http://" + addr
		if name != "gateway" {
			s.Env["OPS_"+upper+"_URL"] = "http://" + addr
		}
	}
	for k, v := range opts.Env {
		s.Env[k] = v
	}
	s.GatewayURL = s.URLs["gateway"]
	skip := map[string]bool{}
	for _, n := range opts.Skip {
		skip[n] = true
	}
	for _, name := range SuiteServices() {
		if skip[name] {
			continue
		}
		var args []string
		if name == "ingest" {
			args = []string{"-role", "all"}
		}
		s.Procs[name] = Start(t, name, Binary(t, name), s.Env, args...)
	}
	for _, name := range SuiteServices() {
		if p, ok := s.Procs[name]; ok {
			WaitReady(t, p, s.URLs[name]+"/readyz", 30*time.Second)
		}
	}
	return s
}
