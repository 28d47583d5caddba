package k8s

// Checks of deploy/compose.yaml and deploy/Dockerfile, which no Docker engine here can run:
// the compose file strict-decodes into the subset of the Compose specification it uses, and
// every image it builds is a real binary of this repository.

import (
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const repoRoot = ".."

// binaries lists the commands this repository builds, from the tree itself:
// services/<name>/cmd/<name> and migrations/cmd/migrate.
func binaries(t *testing.T) []string {
	t.Helper()
	mains, err := filepath.Glob(filepath.Join(repoRoot, "services", "*", "cmd", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mains {
		cmd := filepath.Base(filepath.Dir(m))
		if svc := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(m)))); svc == cmd {
			names = append(names, cmd)
		}
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "migrations", "cmd", "migrate", "main.go")); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	names = append(names, "migrate")
	sort.Strings(names)
	if len(names) < 7 {
		t.Fatalf("found only %v", names)
	}
	return names
}

// The subset of the Compose specification deploy/compose.yaml uses; strict decoding makes a
// misspelled or misplaced key fail here instead of being ignored by `docker compose`.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]*struct{}      `json:"volumes"`
	Networks map[string]composeNetwork `json:"networks"`
	Secrets  map[string]composeFileRef `json:"secrets"`
	Configs  map[string]composeFileRef `json:"configs"`
}

// composeFileRef is a top-level secret or config: a file, relative to deploy/.
type composeFileRef struct {
	File string `json:"file"`
}

// composeMount is a service's secret or config in the long syntax (the only one the file uses).
type composeMount struct {
	Source string `json:"source"`
	Target string `json:"target,omitempty"`
}

type composeNetwork struct {
	Internal bool `json:"internal,omitempty"`
}

type composeService struct {
	Image           string                       `json:"image,omitempty"`
	Build           *composeBuild                `json:"build,omitempty"`
	Entrypoint      []string                     `json:"entrypoint,omitempty"`
	Command         []string                     `json:"command,omitempty"`
	Environment     map[string]string            `json:"environment,omitempty"`
	DependsOn       map[string]composeDependency `json:"depends_on,omitempty"`
	Healthcheck     *composeHealthcheck          `json:"healthcheck,omitempty"`
	Ports           []string                     `json:"ports,omitempty"`
	Volumes         []string                     `json:"volumes,omitempty"`
	Networks        []string                     `json:"networks,omitempty"`
	Restart         string                       `json:"restart,omitempty"`
	ReadOnly        bool                         `json:"read_only,omitempty"`
	Tmpfs           []string                     `json:"tmpfs,omitempty"`
	CapDrop         []string                     `json:"cap_drop,omitempty"`
	SecurityOpt     []string                     `json:"security_opt,omitempty"`
	StopGracePeriod string                       `json:"stop_grace_period,omitempty"`
	Secrets         []composeMount               `json:"secrets,omitempty"`
	Configs         []composeMount               `json:"configs,omitempty"`
}

type composeBuild struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
}

type composeDependency struct {
	Condition string `json:"condition"`
}

type composeHealthcheck struct {
	Test        []string `json:"test"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod string   `json:"start_period,omitempty"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(raw) // resolves anchors and merge keys; duplicate keys fail
	if err != nil {
		t.Fatalf("compose.yaml is not well-formed YAML: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		t.Fatal(err)
	}
	for k := range top {
		if strings.HasPrefix(k, "x-") { // extension fields, only used through anchors
			delete(top, k)
		}
	}
	js, _ = json.Marshal(top)
	var cf composeFile
	strict, err := sigsjson.UnmarshalStrict(js, &cf)
	if err == nil && len(strict) > 0 {
		err = strict[0]
	}
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return cf
}

func TestComposeFile(t *testing.T) {
	cf := loadCompose(t)
	bins := binaries(t)
	built := map[string][]string{} // binary -> compose services running it
	for name, s := range cf.Services {
		if s.Build == nil {
			if s.Image == "" {
				t.Errorf("service %s has neither build nor image", name)
			}
			continue
		}
		if name == "postgres" { // the official image plus q3c, not one of our binaries
			if s.Build.Context != "postgres" || s.Image == "" {
				t.Errorf("postgres builds %s as %q, want context postgres (deploy/postgres/Dockerfile) and an image name", s.Build.Context, s.Image)
			}
			continue
		}
		if s.Build.Context != ".." || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("service %s builds %s with %s, want context .. (the repository root) and deploy/Dockerfile", name, s.Build.Context, s.Build.Dockerfile)
		}
		bin := s.Build.Args["SERVICE"]
		if !slices.Contains(bins, bin) {
			t.Errorf("service %s: build arg SERVICE=%q is not a binary of the repository %v", name, bin, bins)
		}
		built[bin] = append(built[bin], name)
		if !strings.HasPrefix(s.Image, "obsops/"+bin+":") {
			t.Errorf("service %s: image %q, want obsops/%s:TAG", name, s.Image, bin)
		}
	}
	for _, b := range bins {
		if len(built[b]) == 0 {
			t.Errorf("binary %s runs in no compose service", b)
		}
	}

	// Infrastructure, and Redis configured for the ingest buffer.
	if cf.Services["postgres"].Image == "" || cf.Services["redis"].Image == "" {
		t.Fatalf("want postgres and redis services")
	}
	redisCmd := strings.Join(cf.Services["redis"].Command, " ")
	for _, want := range []string{"--appendonly yes", "--appendfsync always", "--auto-aof-rewrite-percentage 400", "--auto-aof-rewrite-min-size 512mb", "--maxmemory-policy noeviction"} {
		if !strings.Contains(redisCmd, want) {
			t.Errorf("redis command %q lacks %q", redisCmd, want)
		}
	}

	// migrate runs once, after PostgreSQL; every service starts after it succeeded.
	m := cf.Services["migrate"]
	if !slices.Equal(m.Command, []string{"up"}) || m.Restart != "no" || m.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("migrate: command %v restart %q depends_on %v, want [up], \"no\", postgres healthy", m.Command, m.Restart, m.DependsOn)
	}

	ports := map[string]string{"gateway": "8080", "authtoken": "8081", "transfer": "8082", "catalog": "8083", "ingest": "8084", "ingest-worker": "8084", "site": "8085"}
	roles := map[string]string{}
	for name, port := range ports {
		s, ok := cf.Services[name]
		if !ok {
			t.Errorf("no compose service %s", name)
			continue
		}
		bin := s.Build.Args["SERVICE"]
		addrVar := "OPS_" + strings.ToUpper(bin) + "_ADDR"
		if got := s.Environment[addrVar]; got != "0.0.0.0:"+port && got != ":"+port {
			t.Errorf("%s: %s=%q, want 0.0.0.0:%s", name, addrVar, got, port)
		}
		if s.Healthcheck == nil || !slices.Contains(s.Healthcheck.Test, "http://127.0.0.1:"+port+"/readyz") {
			t.Errorf("%s: healthcheck %v, want /healthcheck on its own /readyz", name, s.Healthcheck)
		}
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
			t.Errorf("%s: want read_only and cap_drop ALL", name)
		}
		if s.Environment["OPS_DATABASE_URL"] == "" || s.Environment["OPS_REDIS_URL"] == "" {
			t.Errorf("%s: OPS_DATABASE_URL and OPS_REDIS_URL must be set", name)
		}
		if name != "gateway" {
			if s.DependsOn["migrate"].Condition != "service_completed_successfully" {
				t.Errorf("%s: must start after migrate completed successfully", name)
			}
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes %v: only the gateway is published", name, s.Ports)
			}
		}
		// Drain + shutdown timeout must fit in the stop grace period (compose's default is 10 s).
		grace, err := time.ParseDuration(s.StopGracePeriod)
		drain, _ := time.ParseDuration(s.Environment["OPS_SHUTDOWN_DRAIN"])
		timeout, _ := time.ParseDuration(s.Environment["OPS_SHUTDOWN_TIMEOUT"])
		if err != nil || drain == 0 || timeout == 0 || grace <= drain+timeout {
			t.Errorf("%s: stop_grace_period %q must exceed OPS_SHUTDOWN_DRAIN %s + OPS_SHUTDOWN_TIMEOUT %s", name, s.StopGracePeriod, drain, timeout)
		}
		// Every service believes a forwarded client address only with the internal secret,
		// read from the shared volume.
		if f := s.Environment["OPS_INTERNAL_SECRET_FILE"]; f == "" || !slices.Contains(s.Volumes, "internal-secret:"+path.Dir(f)+":ro") {
			t.Errorf("%s: OPS_INTERNAL_SECRET_FILE=%q must be in the internal-secret volume, mounted read-only (volumes %v)", name, f, s.Volumes)
		}
		if _, set := s.Environment["OPS_TRUSTED_GATEWAYS"]; set {
			t.Errorf("%s: OPS_TRUSTED_GATEWAYS is gone: a private source address proves nothing", name)
		}
		// The services reach each other by compose service name.
		for _, up := range []string{"AUTHTOKEN", "TRANSFER", "CATALOG", "INGEST", "SITE"} {
			u, err := url.Parse(s.Environment["OPS_"+up+"_URL"])
			target := strings.ToLower(up)
			if err != nil || u.Hostname() != target || u.Port() != ports[target] {
				t.Errorf("%s: OPS_%s_URL=%q, want http://%s:%s", name, up, s.Environment["OPS_"+up+"_URL"], target, ports[target])
			}
		}
		if bin == "ingest" {
			if len(s.Command) != 2 || s.Command[0] != "-role" {
				t.Errorf("%s: command %v, want -role api|worker", name, s.Command)
			} else {
				roles[s.Command[1]] = name
			}
		}
	}
	// authtoken's JWT signing key: generated once into a volume by a one-shot service.
	at := cf.Services["authtoken"]
	if at.Environment["OPS_JWT_SIGNING_KEY_FILE"] == "" || at.DependsOn["jwt-key"].Condition != "service_completed_successfully" {
		t.Errorf("authtoken: want OPS_JWT_SIGNING_KEY_FILE from the jwt-key volume, after jwt-key completed")
	}
	if roles["api"] != "ingest" || roles["worker"] != "ingest-worker" {
		t.Errorf("ingest roles %v: want the API as service ingest and a separate ingest-worker", roles)
	}
	if gw := cf.Services["gateway"]; !slices.ContainsFunc(gw.Ports, func(p string) bool { return strings.HasSuffix(p, "8080:8080") }) {
		t.Errorf("gateway ports %v: want 8080 published", gw.Ports)
	}
	if s := cf.Services["internal-secret"]; s.Restart != "no" || !slices.Contains(s.Volumes, "internal-secret:/secret") {
		t.Errorf("internal-secret: want a one-shot generator of the internal-secret volume, got %+v", s)
	}

	// Networks: everything on an internal network (no way in or out); only the gateway is
	// published (from "edge"), and only it and authtoken (its way to the identity provider, on
	// "egress") are on another; nothing else shares the gateway's.
	if !cf.Networks["internal"].Internal {
		t.Errorf("network internal must be internal: true")
	}
	for name, s := range cf.Services {
		if !slices.Contains(s.Networks, "internal") {
			t.Errorf("%s: networks %v, want the internal network", name, s.Networks)
		}
		for _, n := range s.Networks {
			net, ok := cf.Networks[n]
			if !ok {
				t.Errorf("%s: network %s is not declared", name, n)
			}
			if !net.Internal && name != "gateway" && name != "authtoken" {
				t.Errorf("%s is on the non-internal network %s: only the gateway (and authtoken, for the identity provider) may be", name, n)
			}
			if n == "edge" && name != "gateway" {
				t.Errorf("%s is on the gateway's network edge", name)
			}
		}
		if len(s.Ports) > 0 && name != "gateway" {
			t.Errorf("%s publishes %v: only the gateway is published", name, s.Ports)
		}
	}
	if gw := cf.Services["gateway"]; !slices.ContainsFunc(gw.Networks, func(n string) bool { return !cf.Networks[n].Internal }) {
		t.Errorf("gateway networks %v: its published port needs a non-internal network", gw.Networks)
	}
}

// TestDockerfile checks the parts of deploy/Dockerfile that a build would only reveal on a
// machine with Docker: the SERVICE values it accepts are exactly the repository's binaries, and
// the build is static, module-local and non-root.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	for _, want := range []string{
		"ARG SERVICE", "FROM golang:${GO_VERSION}-bookworm AS build", "GOWORK=off CGO_ENABLED=0 go build -trimpath",
		"-X main.version=${VERSION} -X main.commit=${COMMIT}", "FROM gcr.io/distroless/static-debian12:nonroot",
		"USER 65532:65532", `ENTRYPOINT ["/app"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^ARG GO_VERSION=1\.26$`).MatchString(df) {
		t.Errorf("Dockerfile: want ARG GO_VERSION=1.26 (go.work says go 1.26)")
	}
	var accepted []string
	for _, m := range regexp.MustCompile(`(?m)^\s*([a-z|]+)\) dir=`).FindAllStringSubmatch(df, -1) {
		accepted = append(accepted, strings.Split(m[1], "|")...)
	}
	sort.Strings(accepted)
	if bins := binaries(t); !slices.Equal(accepted, bins) {
		t.Errorf("Dockerfile accepts SERVICE %v, the repository has %v", accepted, bins)
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", ".local", "bin"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

// TestLocalStackEnvQuoting checks that the environment file `make up` writes (and admins source)
// gives back values holding shell characters as they were: a database URL with '&' and a state
// folder with a space.
func TestLocalStackEnvQuoting(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state with space")
	dbURL := "postgres://ops@db.example:5432/obsops?sslmode=disable&connect_timeout=5"
	cmd := exec.Command("bash", filepath.Join(repoRoot, "deploy", "local", "stack.sh"), "env")
	cmd.Env = append(os.Environ(), "OPS_LOCAL_STATE="+state, "OPS_DATABASE_URL="+dbURL, "OPS_REDIS_URL=redis://127.0.0.1:1/0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stack.sh env: %v\n%s", err, out)
	}
	out, err := exec.Command("bash", "-c", `set -a; . "$1"; set +a; printf '%s\n%s\n' "$OPS_DATABASE_URL" "$OPS_JWT_SIGNING_KEY_FILE"`,
		"-", filepath.Join(state, "env")).CombinedOutput()
	if err != nil {
		t.Fatalf("sourcing the env file: %v\n%s", err, out)
	}
	want := dbURL + "\n" + filepath.Join(state, "keys", "jwt-signing.pem") + "\n"
	if string(out) != want {
		t.Errorf("sourced env gives\n%s\nwant\n%s", out, want)
	}
}

// TestLocalStackSecondaryHoldsNoMainKey: the environment `make up-sites` gives the secondary's
// services (stack.sh secondary-env writes the same file) signs JWTs with the secondary's own key,
// not the main's, trusts the main's public keys, and names none of the main's private keys —
// neither the main's signing key file nor previous keys the main's extra.env adds (issue 24,
// point 8).
func TestLocalStackSecondaryHoldsNoMainKey(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "extra.env"), []byte("OPS_JWT_PREVIOUS_KEYS_FILE=/keys/main-old.pem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot, "deploy", "local", "stack.sh"), "secondary-env")
	cmd.Env = append(os.Environ(), "OPS_LOCAL_STATE="+state, "OPS_DATABASE_URL=postgres://ops@db.example:5432/obsops", "OPS_REDIS_URL=redis://127.0.0.1:1/0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stack.sh secondary-env: %v\n%s", err, out)
	}
	mainEnv, secEnv := filepath.Join(state, "env"), filepath.Join(state, "secondary", "env")
	show := `set -a; . "$1"; set +a; printf '%s|%s|%s|%s|%s\n' "$OPS_SITE_TYPE" "$OPS_JWT_SIGNING_KEY_FILE" "${OPS_JWT_MAIN_PUBLIC_KEYS_FILE:-}" "${OPS_JWT_PREVIOUS_KEYS_FILE:-}" "${OPS_JWT_SIGNING_KEY:-}${OPS_JWT_PREVIOUS_KEYS:-}"`
	read := func(file string) []string {
		out, err := exec.Command("bash", "-c", show, "-", file).CombinedOutput()
		if err != nil {
			t.Fatalf("sourcing %s: %v\n%s", file, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "|")
	}
	mainKey := filepath.Join(state, "keys", "jwt-signing.pem")
	if m := read(mainEnv); m[1] != mainKey || m[3] != "/keys/main-old.pem" {
		t.Fatalf("main env: signing key %q, previous keys %q", m[1], m[3])
	}
	s := read(secEnv)
	want := []string{"secondary", filepath.Join(state, "secondary", "keys", "jwt-signing.pem"),
		filepath.Join(state, "secondary", "keys", "main-jwt-public.pem"), "", ""}
	if !slices.Equal(s, want) {
		t.Errorf("secondary env: OPS_SITE_TYPE|OPS_JWT_SIGNING_KEY_FILE|OPS_JWT_MAIN_PUBLIC_KEYS_FILE|OPS_JWT_PREVIOUS_KEYS_FILE|inline keys = %q, want %q", s, want)
	}
	text, err := os.ReadFile(secEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, main := range []string{mainKey, "/keys/main-old.pem", "PRIVATE KEY"} {
		if strings.Contains(string(text), main) {
			t.Errorf("the secondary's env file names the main's private key material %q:\n%s", main, text)
		}
	}
}
