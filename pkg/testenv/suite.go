package testenv

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
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
	// SigningKeyFile is the JWT signing key (Ed25519 PEM) the suite's authtoken uses.
	SigningKeyFile string
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
	s.SigningKeyFile = SigningKey(t)
	s.Env = map[string]string{
		"OPS_JWT_SIGNING_KEY_FILE": s.SigningKeyFile,
		"OPS_DATABASE_URL":         s.DatabaseURL,
		"OPS_REDIS_URL":            s.Redis.URL,
		"OPS_SHUTDOWN_DRAIN":       "0s",
		"OPS_SHUTDOWN_TIMEOUT":     "5s",
		"OPS_LOG_LEVEL":            "info",
		// The gateway proves with it that the client address it forwards is the real one.
		"OPS_INTERNAL_SECRET": randomHex(32),
	}
	for _, name := range SuiteServices() {
		s.Env["OPS_"+strings.ToUpper(name)+"_ADDR"] = FreeAddr(t)
	}
	s.Env["OPS_GATEWAY_METRICS_ADDR"] = FreeAddr(t)
	for k, v := range opts.Env {
		s.Env[k] = v
	}
	// URLs follow the final addresses, so an overridden address moves the service's URL for
	// the tests and for the other services alike (unless the caller set that URL itself).
	for _, name := range SuiteServices() {
		upper := strings.ToUpper(name)
		s.URLs[name] = "http://" + s.Env["OPS_"+upper+"_ADDR"]
		if _, set := opts.Env["OPS_"+upper+"_URL"]; name != "gateway" && !set {
			s.Env["OPS_"+upper+"_URL"] = s.URLs[name]
		}
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

// SigningKey writes a new Ed25519 JWT signing key (PKCS#8 PEM) into the test's temp dir.
func SigningKey(t testing.TB) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwt-signing.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// PublicKeyFile writes the public half of the Ed25519 private key in privPath (PKCS#8 PEM) as a
// PEM "PUBLIC KEY" block into the test's temp dir and returns its path: a secondary site's
// OPS_JWT_MAIN_PUBLIC_KEYS_FILE, which holds the main's public keys and never its private key.
func PublicKeyFile(t testing.TB, privPath string) string {
	t.Helper()
	data, err := os.ReadFile(privPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", privPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("%s: not an Ed25519 key", privPath)
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwt-main-public.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Admin runs `authtoken admin ARGS...` with the suite's environment and returns its stdout.
func (s *Suite) Admin(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(Binary(t, "authtoken"), append([]string{"admin"}, args...)...)
	cmd.Env = envList(os.Environ(), s.Env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("authtoken admin %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// JWT issues a session JWT for user with roles through the real admin command (creating the
// user if needed).
func (s *Suite) JWT(t testing.TB, user string, roles ...string) string {
	t.Helper()
	args := []string{"issue-jwt", "--user", user}
	if len(roles) > 0 {
		args = append(args, "--roles", strings.Join(roles, ","))
	}
	return s.Admin(t, args...)
}
