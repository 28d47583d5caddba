package k8s

// Least privilege in deploy/compose.yaml, as in Kubernetes (TestEveryServiceHasItsOwnCredentials)
// and the local stack: each service's own PostgreSQL role and Redis user, passwords from Compose
// secrets made by deploy/compose-secrets.sh (docs/operations.md, "Database roles", "Redis users").

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
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

	appsv1 "k8s.io/api/apps/v1"
)

// secretPath is where a service's secret is mounted: /run/secrets/SOURCE by default, a relative
// target under /run/secrets, an absolute one as it is (Compose bind-mounts file secrets there).
func secretPath(m composeMount) string {
	switch {
	case m.Target == "":
		return "/run/secrets/" + m.Source
	case path.IsAbs(m.Target):
		return path.Clean(m.Target)
	default:
		return path.Join("/run/secrets", m.Target)
	}
}

// secretAt is the secret the service mounts at file, or "".
func (s composeService) secretAt(file string) string {
	if file == "" {
		return ""
	}
	for _, m := range s.Secrets {
		if secretPath(m) == path.Clean(file) {
			return m.Source
		}
	}
	return ""
}

// configAt is the config the service mounts at file (target, default /SOURCE), or "".
func (s composeService) configAt(file string) string {
	for _, m := range s.Configs {
		target := m.Target
		if target == "" {
			target = "/" + m.Source
		}
		if path.Clean(target) == path.Clean(file) {
			return m.Source
		}
	}
	return ""
}

// grantRoles are the services with a PostgreSQL role: one grant file each in migrations/grants/.
func grantRoles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "migrations", "grants", "*.sql"))
	if err != nil || len(files) < 5 {
		t.Fatalf("migrations/grants: %v %v", files, err)
	}
	var roles []string
	for _, f := range files {
		roles = append(roles, strings.TrimSuffix(filepath.Base(f), ".sql"))
	}
	return roles
}

// aclUsers are the users of pkg/redisacl/users.acl.
func aclUsers(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "pkg", "redisacl", "users.acl"))
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "user" {
			users = append(users, f[1])
		}
	}
	if len(users) < 6 {
		t.Fatalf("users.acl: only %v", users)
	}
	return users
}

// redisPodACL is what the Redis pod of k8s/components/redis does before Redis starts: its init
// container's script, where that container finds users.acl and the passwords, and the aclfile
// redis.conf names.
type redisPodACL struct {
	script, usersFile, passwordsDir, aclFile string
}

func loadRedisPodACL(t *testing.T) redisPodACL {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("components", "redis", "redis.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeAll(raw)
	if err != nil {
		t.Fatal(err)
	}
	var sts *appsv1.StatefulSet
	for _, o := range objs {
		if s, ok := o.Value.(*appsv1.StatefulSet); ok && o.Name == "redis" {
			sts = s
		}
	}
	if sts == nil || len(sts.Spec.Template.Spec.InitContainers) != 1 {
		t.Fatalf("k8s/components/redis: want the StatefulSet redis with one init container")
	}
	init := sts.Spec.Template.Spec.InitContainers[0]
	if !slices.Equal(init.Command[:2], []string{"sh", "-c"}) || len(init.Command) != 3 {
		t.Fatalf("the Redis pod's init container runs %v, want sh -c SCRIPT", init.Command)
	}
	mount := func(vol string) string {
		for _, m := range init.VolumeMounts {
			if m.Name == vol {
				return m.MountPath
			}
		}
		t.Fatalf("the Redis pod's init container mounts no volume %s", vol)
		return ""
	}
	acl := redisPodACL{script: init.Command[2], usersFile: path.Join(mount("config"), "users.acl"), passwordsDir: mount("users")}
	conf, err := os.ReadFile(filepath.Join("components", "redis", "redis.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(conf), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "aclfile" {
			acl.aclFile = f[1]
		}
	}
	if acl.aclFile == "" || !strings.Contains(acl.script, acl.aclFile) {
		t.Fatalf("redis.conf's aclfile %q is not what the init container writes", acl.aclFile)
	}
	return acl
}

// composeUnescape is what Compose's interpolation makes of a value that must reach the container
// as it is: $$ becomes $; a lone $ would be a variable (or an error), so it is reported.
func composeUnescape(s string) (string, bool) {
	rest := strings.ReplaceAll(s, "$$", "")
	return strings.ReplaceAll(s, "$$", "$"), !strings.Contains(rest, "$")
}

// TestComposeLeastPrivilege: every service of deploy/compose.yaml with a role in migrations/grants/
// connects as obsops_<service> with a password secret of its own, the one `migrate up` sets the
// role's password from; every service using Redis connects as its own user of
// pkg/redisacl/users.acl with a password secret of its own, the one Redis' ACL file is built with
// (by the Redis pod's init-container script, from users.acl itself); nothing but the migration
// job gets the schema owner's URL, and no URL holds a credential.
func TestComposeLeastPrivilege(t *testing.T) {
	cf := loadCompose(t)
	roles, users := grantRoles(t), aclUsers(t)
	pod := loadRedisPodACL(t)

	mountedBy := map[string][]string{} // secret -> the services mounting it
	for _, name := range keys(cf.Services) {
		s := cf.Services[name]
		for _, m := range s.Secrets {
			if _, ok := cf.Secrets[m.Source]; !ok {
				t.Errorf("%s mounts the undeclared secret %s", name, m.Source)
			}
			mountedBy[m.Source] = append(mountedBy[m.Source], name)
		}
		for _, m := range s.Configs {
			if _, ok := cf.Configs[m.Source]; !ok {
				t.Errorf("%s mounts the undeclared config %s", name, m.Source)
			}
		}
	}

	// The schema owner: PostgreSQL's superuser, its password a secret; its URL a secret that only
	// the migration job mounts.
	pg, migrate := cf.Services["postgres"], cf.Services["migrate"]
	ownerPassword := pg.secretAt(pg.Environment["POSTGRES_PASSWORD_FILE"])
	if _, inline := pg.Environment["POSTGRES_PASSWORD"]; inline || ownerPassword == "" {
		t.Errorf("postgres: the owner's password must come from a secret (POSTGRES_PASSWORD_FILE), not POSTGRES_PASSWORD")
	}
	ownerURL := migrate.secretAt(migrate.Environment["OPS_DATABASE_URL_FILE"])
	if ownerURL == "" {
		t.Errorf("migrate: OPS_DATABASE_URL_FILE=%q must be a secret it mounts (the schema owner's URL)", migrate.Environment["OPS_DATABASE_URL_FILE"])
	}
	if _, set := migrate.Environment["OPS_DATABASE_URL"]; set {
		t.Errorf("migrate: the owner's URL comes from OPS_DATABASE_URL_FILE, not OPS_DATABASE_URL")
	}
	for _, sec := range []string{ownerPassword, ownerURL} {
		for _, by := range mountedBy[sec] {
			if sec != "" && by != "migrate" && !(by == "postgres" && sec == ownerPassword) {
				t.Errorf("%s mounts the schema owner's secret %s: only postgres (its password) and migrate may", by, sec)
			}
		}
	}
	rolesDir := migrate.Environment["OPS_ROLE_PASSWORDS_DIR"]
	if rolesDir == "" {
		t.Errorf("migrate sets no role passwords (OPS_ROLE_PASSWORDS_DIR)")
	}

	// No URL holds a credential and no password is inline, anywhere but in the owner's secrets.
	for _, name := range keys(cf.Services) {
		s := cf.Services[name]
		for _, k := range []string{"OPS_DATABASE_URL", "OPS_MAIN_DATABASE_URL", "OPS_REDIS_URL"} {
			if v, set := s.Environment[k]; set {
				if u, err := url.Parse(v); err != nil || u.User != nil {
					t.Errorf("%s: %s=%q must name no user or password: each service adds its own", name, k, v)
				}
			}
		}
		for _, k := range []string{"OPS_DATABASE_PASSWORD", "OPS_REDIS_PASSWORD", "OPS_MAIN_DATABASE_URL_FILE"} {
			if _, set := s.Environment[k]; set {
				t.Errorf("%s sets %s: passwords come from its own secrets (%s_FILE)", name, k, strings.TrimSuffix(k, "_FILE"))
			}
		}
		if _, set := s.Environment["OPS_DATABASE_URL_FILE"]; set && name != "migrate" {
			t.Errorf("%s sets OPS_DATABASE_URL_FILE: only the migration job has the owner's URL", name)
		}
	}

	aclWriter := composeACLWriter(t, cf, pod, users)
	w := cf.Services[aclWriter]

	// own checks that only services running bin (and the named exception) mount the secret.
	own := func(name, sec, bin, except string) {
		for _, by := range mountedBy[sec] {
			if by != except && (cf.Services[by].Build == nil || cf.Services[by].Build.Args["SERVICE"] != bin) {
				t.Errorf("%s's secret %s is mounted by %s too", name, sec, by)
			}
		}
	}
	services := 0
	for _, name := range keys(cf.Services) {
		s := cf.Services[name]
		if s.Build == nil || name == "postgres" || s.Build.Args["SERVICE"] == "migrate" {
			continue
		}
		services++
		bin := s.Build.Args["SERVICE"]
		dbSecret := s.secretAt(s.Environment["OPS_DATABASE_PASSWORD_FILE"])
		if slices.Contains(roles, bin) {
			if s.Environment["OPS_DATABASE_USER"] != "obsops_"+bin || dbSecret == "" {
				t.Errorf("%s: OPS_DATABASE_USER=%q OPS_DATABASE_PASSWORD_FILE=%q, want obsops_%s and a secret it mounts",
					name, s.Environment["OPS_DATABASE_USER"], s.Environment["OPS_DATABASE_PASSWORD_FILE"], bin)
			} else {
				own(name, dbSecret, bin, "migrate")
				if got := migrate.secretAt(path.Join(rolesDir, bin)); got != dbSecret {
					t.Errorf("migrate sets obsops_%s's password from secret %q at %s, %s reads %s", bin, got, path.Join(rolesDir, bin), name, dbSecret)
				}
			}
		} else if s.Environment["OPS_DATABASE_USER"] != "" || dbSecret != "" {
			t.Errorf("%s: %s has no role in migrations/grants/, so no OPS_DATABASE_USER or database password", name, bin)
		}
		if s.Environment["OPS_REDIS_URL"] == "" {
			continue
		}
		user := s.Environment["OPS_REDIS_USERNAME"]
		redisSecret := s.secretAt(s.Environment["OPS_REDIS_PASSWORD_FILE"])
		if user != bin || !slices.Contains(users, user) || redisSecret == "" {
			t.Errorf("%s: OPS_REDIS_USERNAME=%q OPS_REDIS_PASSWORD_FILE=%q, want %s (a user of pkg/redisacl/users.acl %v) and a secret it mounts",
				name, user, s.Environment["OPS_REDIS_PASSWORD_FILE"], bin, users)
			continue
		}
		if redisSecret == dbSecret {
			t.Errorf("%s: the same secret %s for PostgreSQL and Redis", name, redisSecret)
		}
		own(name, redisSecret, bin, aclWriter)
		if got := w.secretAt(path.Join(pod.passwordsDir, user)); got != redisSecret {
			t.Errorf("Redis' ACL file gives %s the password of secret %q (%s at %s), %s reads %s", user, got, aclWriter, path.Join(pod.passwordsDir, user), name, redisSecret)
		}
	}
	if services < 7 {
		t.Errorf("checked only %d services", services)
	}
}

// composeACLWriter checks that Redis reads the ACL file a one-shot service writes with the Redis
// pod's script, from users.acl itself and users' passwords only, and returns that service ("" and
// an error if there is none).
func composeACLWriter(t *testing.T, cf composeFile, pod redisPodACL, users []string) string {
	t.Helper()
	redis := cf.Services["redis"]
	var aclFile string
	if i := slices.Index(redis.Command, "--aclfile"); i >= 0 && i+1 < len(redis.Command) {
		aclFile = redis.Command[i+1]
	}
	if aclFile != pod.aclFile {
		t.Errorf("redis: --aclfile %q, want %s (what the Redis pod's script writes)", aclFile, pod.aclFile)
		return ""
	}
	aclVolume := ""
	for _, v := range redis.Volumes {
		if f := strings.Split(v, ":"); len(f) == 3 && f[1] == path.Dir(aclFile) && f[2] == "ro" {
			aclVolume = f[0]
		}
	}
	if aclVolume == "" {
		t.Errorf("redis: no volume mounted read-only at %s (volumes %v)", path.Dir(aclFile), redis.Volumes)
		return ""
	}
	aclWriter := ""
	for _, name := range keys(cf.Services) {
		s := cf.Services[name]
		if name != "redis" && slices.Contains(s.Volumes, aclVolume+":"+path.Dir(aclFile)) {
			aclWriter = name
		}
	}
	if aclWriter == "" {
		t.Errorf("no service writes the volume %s at %s", aclVolume, path.Dir(aclFile))
		return ""
	}
	w := cf.Services[aclWriter]
	if redis.DependsOn[aclWriter].Condition != "service_completed_successfully" || w.Restart != "no" {
		t.Errorf("redis must start after the one-shot %s completed (depends_on %v, its restart %q)", aclWriter, redis.DependsOn, w.Restart)
	}
	if !slices.Equal(w.Entrypoint, []string{"sh", "-c"}) || len(w.Command) != 1 {
		t.Errorf("%s: entrypoint %v command %d words, want sh -c SCRIPT", aclWriter, w.Entrypoint, len(w.Command))
	} else if script, escaped := composeUnescape(w.Command[0]); !escaped {
		t.Errorf("%s: its script has a lone $: Compose would interpolate it (write $$)", aclWriter)
	} else if script != pod.script {
		t.Errorf("%s: its script (after Compose's $$ -> $) differs from the Redis pod's init container's (k8s/components/redis/redis.yaml):\n%s\nwant\n%s", aclWriter, script, pod.script)
	}
	if c := w.configAt(pod.usersFile); c == "" || path.Clean(path.Join("deploy", cf.Configs[c].File)) != "pkg/redisacl/users.acl" {
		t.Errorf("%s: want the config of file ../pkg/redisacl/users.acl at %s (configs %v)", aclWriter, pod.usersFile, w.Configs)
	}
	if !w.ReadOnly || !slices.Equal(w.CapDrop, []string{"ALL"}) {
		t.Errorf("%s: want read_only and cap_drop ALL", aclWriter)
	}
	for _, m := range w.Secrets {
		if u := strings.TrimPrefix(secretPath(m), pod.passwordsDir+"/"); u == secretPath(m) || (u != "admin" && !slices.Contains(users, u)) {
			t.Errorf("%s mounts %s at %s: only users' passwords at %s/USER", aclWriter, m.Source, secretPath(m), pod.passwordsDir)
		}
	}

	return aclWriter
}

// TestComposeSecretsScript: deploy/compose-secrets.sh makes every secret deploy/compose.yaml
// declares, and nothing else, in a directory only its owner enters; a second run keeps them (a
// password changed under a running stack would lock services out); the owner's URL holds the
// owner's password. The directory is kept out of git and out of the image build context.
func TestComposeSecretsScript(t *testing.T) {
	cf := loadCompose(t)
	var want []string
	for name, s := range cf.Secrets {
		if path.Clean(s.File) != "secrets/"+name {
			t.Errorf("secret %s: file %q, want ./secrets/%s (what deploy/compose-secrets.sh makes)", name, s.File, name)
		}
		want = append(want, name)
	}
	sort.Strings(want)
	dir := filepath.Join(t.TempDir(), "secrets")
	run := func() map[string][]byte {
		out, err := exec.Command("sh", filepath.Join(repoRoot, "deploy", "compose-secrets.sh"), dir).CombinedOutput()
		if err != nil {
			t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			got[e.Name()] = b
			if info, _ := e.Info(); info.Mode().Perm() != 0o444 {
				t.Errorf("%s: mode %v, want 0444 (readable by the container's own user, in a 0700 directory)", e.Name(), info.Mode().Perm())
			}
		}
		return got
	}
	first := run()
	var names []string
	for n := range first {
		names = append(names, n)
	}
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Errorf("compose-secrets.sh made %v, compose.yaml declares %v", names, want)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("the secrets directory: %v %v, want mode 0700", info.Mode(), err)
	}
	for n, b := range first {
		if v := strings.TrimSpace(string(b)); len(v) < 16 {
			t.Errorf("%s: %q is shorter than 16 characters", n, v)
		}
	}
	second := run()
	for n, b := range first {
		if !bytes.Equal(b, second[n]) {
			t.Errorf("a second run changed %s", n)
		}
	}
	pg := cf.Services["postgres"]
	u, err := url.Parse(strings.TrimSpace(string(first["database-url"])))
	if err != nil || u.User == nil {
		t.Fatalf("database-url %q: %v", first["database-url"], err)
	}
	pw, _ := u.User.Password()
	if u.User.Username() != pg.Environment["POSTGRES_USER"] || pw != strings.TrimSpace(string(first["postgres-password"])) ||
		u.Hostname() != "postgres" || u.Path != "/"+pg.Environment["POSTGRES_DB"] {
		t.Errorf("database-url %s is not the owner %s with postgres-password at postgres/%s", u.Redacted(), pg.Environment["POSTGRES_USER"], pg.Environment["POSTGRES_DB"])
	}

	for file, line := range map[string]string{".gitignore": "/deploy/secrets/", ".dockerignore": "deploy/secrets"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(raw), "\n"), line) {
			t.Errorf("%s lacks the line %s", file, line)
		}
	}
}

// TestComposeRedisACLWorks runs what Compose would: deploy/compose-secrets.sh, then redis-acl's
// script with the secrets and users.acl where compose.yaml mounts them (paths moved into a
// temporary directory), then a real redis-server on the ACL file it wrote. Every service logs in
// as its user with the password of the secret it mounts; a wrong password is refused; an
// unauthenticated connection may PING and nothing else.
func TestComposeRedisACLWorks(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed (run tests with `make test`, which installs it)")
	}
	cf := loadCompose(t)
	pod := loadRedisPodACL(t)
	aclWriter := composeACLWriter(t, cf, pod, aclUsers(t))
	if aclWriter == "" || t.Failed() {
		t.FailNow()
	}
	w := cf.Services[aclWriter]
	tmp := t.TempDir()
	secrets := filepath.Join(tmp, "secrets")
	if out, err := exec.Command("sh", filepath.Join(repoRoot, "deploy", "compose-secrets.sh"), secrets).CombinedOutput(); err != nil {
		t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
	}
	// The container's file system, under root: the secrets and config where redis-acl mounts them.
	root := filepath.Join(tmp, "root")
	place := func(target, source string) {
		dst := filepath.Join(root, filepath.FromSlash(target))
		b, err := os.ReadFile(source)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range w.Secrets {
		place(secretPath(m), filepath.Join(secrets, m.Source))
	}
	for _, m := range w.Configs {
		place(m.Target, filepath.Join(repoRoot, "deploy", filepath.FromSlash(cf.Configs[m.Source].File)))
	}
	if err := os.MkdirAll(filepath.Join(root, path.Dir(pod.aclFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := composeUnescape(w.Command[0])
	for _, dir := range []string{path.Dir(pod.aclFile), pod.passwordsDir, path.Dir(pod.usersFile)} {
		script = strings.ReplaceAll(script, dir+"/", filepath.Join(root, dir)+"/")
		script = strings.ReplaceAll(script, dir+" ", filepath.Join(root, dir)+" ")
	}
	if regexp.MustCompile(`(^|[^\w/])/(run|var|etc)/`).MatchString(strings.ReplaceAll(script, root+"/", "ROOT/")) {
		t.Fatalf("a path of the script was not moved under %s:\n%s", root, script)
	}
	cmd := exec.Command("sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("redis-acl's script: %v\n%s", err, stderr.String())
	}
	if got := stderr.String(); got != "no password for Redis user keda: not created\n" {
		t.Errorf("redis-acl's script said %q, want only that keda (Kubernetes only) is not created", got)
	}

	addr := startRedis(t, filepath.Join(root, pod.aclFile), tmp)
	send := func(c *redisConn, args ...string) string {
		t.Helper()
		reply, err := c.do(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return reply
	}
	anon := dialRedis(t, addr)
	if r := send(anon, "PING"); r != "+PONG" {
		t.Errorf("an unauthenticated PING: %q", r)
	}
	if r := send(anon, "GET", "ingest:x"); !strings.HasPrefix(r, "-NOPERM") {
		t.Errorf("an unauthenticated GET: %q, want NOPERM", r)
	}
	checked := 0
	for _, name := range keys(cf.Services) {
		s := cf.Services[name]
		user, file := s.Environment["OPS_REDIS_USERNAME"], s.Environment["OPS_REDIS_PASSWORD_FILE"]
		if user == "" {
			continue
		}
		pw, err := os.ReadFile(filepath.Join(secrets, s.secretAt(file)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		c := dialRedis(t, addr)
		if r := send(c, "AUTH", user, "wrong-"+strings.TrimSpace(string(pw))); !strings.HasPrefix(r, "-WRONGPASS") {
			t.Errorf("%s: AUTH %s with a wrong password: %q", name, user, r)
		}
		if r := send(c, "AUTH", user, strings.TrimRight(string(pw), "\r\n")); r != "+OK" {
			t.Errorf("%s: AUTH %s with the password of its secret %s: %q", name, user, s.secretAt(file), r)
		}
		checked++
	}
	admin, err := os.ReadFile(filepath.Join(secrets, "redis-admin-password"))
	if err != nil {
		t.Fatal(err)
	}
	if r := send(dialRedis(t, addr), "AUTH", "admin", strings.TrimSpace(string(admin))); r != "+OK" {
		t.Errorf("AUTH admin: %q", r)
	}
	if checked < 7 {
		t.Errorf("only %d services log in to Redis", checked)
	}
}

// startRedis runs redis-server on a free loopback port with the ACL file and no persistence,
// until the test ends, and returns its address.
func startRedis(t *testing.T, aclFile, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--aclfile", aclFile)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not answer on %s:\n%s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisConn speaks just enough RESP for the test: a command out, one simple reply line back.
type redisConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRedis(t *testing.T, addr string) *redisConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &redisConn{c: c, r: bufio.NewReader(c)}
}

func (rc *redisConn) do(args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := rc.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
