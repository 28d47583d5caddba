package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Common holds the settings every service reads: where its state lives, how it logs and how it
// shuts down. Each service embeds it in its own configuration struct.
type Common struct {
	DatabaseURL string `env:"OPS_DATABASE_URL"`
	DBMaxConns  int    `env:"OPS_DB_MAX_CONNS" envDefault:"10"`
	RedisURL    string `env:"OPS_REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	// DatabaseUser and DatabasePassword are the service's PostgreSQL role and its password
	// (docs/operations.md, "Database roles"): they replace the user and password of
	// OPS_DATABASE_URL and OPS_MAIN_DATABASE_URL (the same role at both: a replica has the main's
	// roles), so the URLs hold no secret and the password comes from a file
	// (OPS_DATABASE_PASSWORD_FILE, a Kubernetes Secret). Empty: the URLs' own.
	DatabaseUser     string `env:"OPS_DATABASE_USER"`
	DatabasePassword string `env:"OPS_DATABASE_PASSWORD"`
	// MainDatabaseUser and MainDatabasePassword, when set, replace the user and password of
	// OPS_MAIN_DATABASE_URL instead of OPS_DATABASE_USER/PASSWORD: a secondary site's ingest
	// reaches the main site's database as obsops_replay, a role limited to the replay of
	// buffered writes (decisions §45), and its own role at the replica.
	MainDatabaseUser     string `env:"OPS_MAIN_DATABASE_USER"`
	MainDatabasePassword string `env:"OPS_MAIN_DATABASE_PASSWORD"`
	// RedisUsername and RedisPassword are the service's Redis ACL user and its password
	// (docs/operations.md, "Redis users"); they replace those of OPS_REDIS_URL. Empty: the URL's
	// own (none: Redis' default user).
	RedisUsername   string        `env:"OPS_REDIS_USERNAME"`
	RedisPassword   string        `env:"OPS_REDIS_PASSWORD"`
	LogLevel        string        `env:"OPS_LOG_LEVEL" envDefault:"info"`
	BodyLimitBytes  int           `env:"OPS_BODY_LIMIT_BYTES" envDefault:"1048576"`
	ShutdownDrain   time.Duration `env:"OPS_SHUTDOWN_DRAIN" envDefault:"5s"`
	ShutdownTimeout time.Duration `env:"OPS_SHUTDOWN_TIMEOUT" envDefault:"15s"`
	SiteName        string        `env:"OPS_SITE_NAME" envDefault:"FYST"`
	SiteType        string        `env:"OPS_SITE_TYPE" envDefault:"main"`
	// MainSiteName names the main site (the data centre) in what a secondary site answers to a
	// change it does not make (409 write_at_main_site: make it there). Empty: "the main site".
	MainSiteName string `env:"OPS_MAIN_SITE_NAME"`
	// MainDatabaseURL is the main site's PostgreSQL primary. At a secondary site (where
	// OPS_DATABASE_URL is the local read replica) only ingest uses it, and requires it
	// (database.AttachPools): its worker replays buffered writes there; authtoken, catalog and
	// site make no change there (decisions §45). At the main site it defaults to
	// OPS_DATABASE_URL (MainDB).
	MainDatabaseURL string `env:"OPS_MAIN_DATABASE_URL"`
	// MainDBTimeout bounds every wait on the main database from a secondary site: connecting,
	// and each read or write on a connection. Past it the main site counts as unreachable and
	// the request is answered 503 instead of hanging on a dead WAN.
	MainDBTimeout time.Duration `env:"OPS_MAIN_DB_TIMEOUT" envDefault:"1500ms"`
	// InternalSecret is shared by the gateway and every service: the gateway sends it with each
	// forwarded request and services with their internal calls (token verification). Only a
	// request carrying it may name the client address (X-Real-IP, a verification's client_ip);
	// without it the connection's own address counts. Empty: nothing is trusted to name one.
	InternalSecret string `env:"OPS_INTERNAL_SECRET"`
	// PprofAddr is where Go's profiler (net/http/pprof) is served, for diagnosing CPU and memory
	// use in place; empty (the default) serves none. It exposes the process' internals: bind it to
	// loopback (127.0.0.1:6060) or a port only operators reach.
	PprofAddr string `env:"OPS_PPROF_ADDR"`
}

// Validate checks the shared settings.
func (c *Common) Validate() error {
	if err := OneOf("OPS_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error"); err != nil {
		return err
	}
	if err := OneOf("OPS_SITE_TYPE", c.SiteType, "main", "secondary"); err != nil {
		return err
	}
	if c.DatabaseURL != "" {
		if err := URL("OPS_DATABASE_URL", c.DatabaseURL, "postgres", "postgresql"); err != nil {
			return err
		}
	}
	if c.MainDatabaseURL != "" {
		if err := URL("OPS_MAIN_DATABASE_URL", c.MainDatabaseURL, "postgres", "postgresql"); err != nil {
			return err
		}
	}
	if c.MainDBTimeout < 100*time.Millisecond || c.MainDBTimeout > time.Minute {
		return &Invalid{Var: "OPS_MAIN_DB_TIMEOUT", Reason: "must be within [100ms, 1m]"}
	}
	if err := URL("OPS_REDIS_URL", c.RedisURL, "redis", "rediss"); err != nil {
		return err
	}
	if c.DBMaxConns < 1 {
		return &Invalid{Var: "OPS_DB_MAX_CONNS", Reason: "must be at least 1"}
	}
	if c.BodyLimitBytes < 1024 {
		return &Invalid{Var: "OPS_BODY_LIMIT_BYTES", Reason: "must be at least 1024"}
	}
	if c.InternalSecret != "" && len(c.InternalSecret) < 32 {
		return &Invalid{Var: "OPS_INTERNAL_SECRET", Reason: "must be at least 32 characters (e.g. openssl rand -hex 32)"}
	}
	if c.ShutdownDrain < 0 || c.ShutdownTimeout <= 0 {
		return &Invalid{Var: "OPS_SHUTDOWN_TIMEOUT", Reason: "drain must be >= 0 and timeout > 0"}
	}
	return c.applyCredentials()
}

// applyCredentials writes OPS_DATABASE_USER/PASSWORD into the database URLs (OPS_MAIN_DATABASE_USER/
// PASSWORD into OPS_MAIN_DATABASE_URL when either is set) and
// OPS_REDIS_USERNAME/PASSWORD into the Redis URL, so every consumer of the URLs (the pools, the
// admin commands) connects with them. A password without a user keeps the URL's user.
func (c *Common) applyCredentials() error {
	var err error
	if c.DatabaseURL, err = withCredentials("OPS_DATABASE_URL", c.DatabaseURL, c.DatabaseUser, c.DatabasePassword); err != nil {
		return err
	}
	mainUser, mainPassword := c.DatabaseUser, c.DatabasePassword
	if c.MainDatabaseUser != "" || c.MainDatabasePassword != "" {
		mainUser, mainPassword = c.MainDatabaseUser, c.MainDatabasePassword
	}
	if c.MainDatabaseURL, err = withCredentials("OPS_MAIN_DATABASE_URL", c.MainDatabaseURL, mainUser, mainPassword); err != nil {
		return err
	}
	c.RedisURL, err = withCredentials("OPS_REDIS_URL", c.RedisURL, c.RedisUsername, c.RedisPassword)
	return err
}

// withCredentials returns raw (a URL of the variable name) with user and password in place of
// its own, each only when given; an empty raw stays empty.
func withCredentials(name, raw, user, password string) (string, error) {
	if raw == "" || (user == "" && password == "") {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", &Invalid{Var: name, Reason: "not an absolute URL"}
	}
	if user == "" && u.User != nil {
		user = u.User.Username()
	}
	if password == "" && u.User != nil {
		password, _ = u.User.Password()
	}
	if password == "" {
		u.User = url.User(user)
	} else {
		u.User = url.UserPassword(user, password)
	}
	return u.String(), nil
}

// Secondary reports whether this is a secondary site (an observatory): reads from the local
// replica, writes to the main site.
func (c *Common) Secondary() bool { return c.SiteType == "secondary" }

// MainDB is where writes go: OPS_MAIN_DATABASE_URL, else (a main site) OPS_DATABASE_URL.
func (c *Common) MainDB() string {
	if c.MainDatabaseURL != "" {
		return c.MainDatabaseURL
	}
	return c.DatabaseURL
}

// Upstreams are the base URLs at which the services reach each other (the gateway routes to
// them; the site service checks their readiness; every service verifies API tokens at authtoken).
type Upstreams struct {
	AuthtokenURL string `env:"OPS_AUTHTOKEN_URL" envDefault:"http://127.0.0.1:8081"`
	TransferURL  string `env:"OPS_TRANSFER_URL" envDefault:"http://127.0.0.1:8082"`
	CatalogURL   string `env:"OPS_CATALOG_URL" envDefault:"http://127.0.0.1:8083"`
	IngestURL    string `env:"OPS_INGEST_URL" envDefault:"http://127.0.0.1:8084"`
	SiteURL      string `env:"OPS_SITE_URL" envDefault:"http://127.0.0.1:8085"`
}

// Validate checks that every upstream is an http(s) URL.
func (u *Upstreams) Validate() error {
	for name, v := range u.ByVariable() {
		if err := URL(name, v, "http", "https"); err != nil {
			return err
		}
	}
	return nil
}

// ByVariable returns the upstream URLs keyed by their environment variable.
func (u *Upstreams) ByVariable() map[string]string {
	return map[string]string{
		"OPS_AUTHTOKEN_URL": u.AuthtokenURL,
		"OPS_TRANSFER_URL":  u.TransferURL,
		"OPS_CATALOG_URL":   u.CatalogURL,
		"OPS_INGEST_URL":    u.IngestURL,
		"OPS_SITE_URL":      u.SiteURL,
	}
}

// ByService returns the upstream URLs keyed by service name.
func (u *Upstreams) ByService() map[string]string {
	return map[string]string{
		"authtoken": u.AuthtokenURL,
		"transfer":  u.TransferURL,
		"catalog":   u.CatalogURL,
		"ingest":    u.IngestURL,
		"site":      u.SiteURL,
	}
}

// URL returns an *Invalid unless value parses as an absolute URL with one of the schemes.
func URL(name, value string, schemes ...string) error {
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		return &Invalid{Var: name, Reason: "not an absolute URL"}
	}
	return OneOf(name, u.Scheme, schemes...)
}

// Networks cleans and checks a comma-separated list of addresses and CIDR ranges (trusted
// proxies, trusted gateways): entries are trimmed, empty ones dropped, and any other entry that is
// neither an IP address nor a CIDR range is an *Invalid naming the variable. It returns the
// cleaned list, nil when nothing is left.
func Networks(name string, list []string) ([]string, error) {
	var out []string
	for _, v := range list {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if _, _, err := net.ParseCIDR(v); err != nil && net.ParseIP(v) == nil {
			return nil, &Invalid{Var: name, Reason: fmt.Sprintf("invalid address or CIDR range %q", v)}
		}
		out = append(out, v)
	}
	return out, nil
}
