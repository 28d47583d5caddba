package config_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/config"
)

type sample struct {
	config.Common
	Port  int           `env:"OPS_TEST_PORT" envDefault:"8080"`
	Wait  time.Duration `env:"OPS_TEST_WAIT" envDefault:"1s"`
	Token string        `env:"OPS_TEST_TOKEN"`
}

func TestLoadDefaults(t *testing.T) {
	var c sample
	require.NoError(t, config.Load(&c))
	require.Equal(t, 8080, c.Port)
	require.Equal(t, "main", c.SiteType)
	require.Equal(t, 5*time.Second, c.ShutdownDrain)
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	cases := []struct {
		name, env, value, want string
	}{
		{"int", "OPS_TEST_PORT", "eighty", `OPS_TEST_PORT: invalid value "eighty": expected an integer`},
		{"duration", "OPS_TEST_WAIT", "soon", `OPS_TEST_WAIT: invalid value "soon": expected a duration such as 5s or 1m30s`},
		{"embedded int", "OPS_DB_MAX_CONNS", "x", `OPS_DB_MAX_CONNS: invalid value "x": expected an integer`},
		{"enum", "OPS_SITE_TYPE", "moon", `OPS_SITE_TYPE: invalid value "moon": must be one of main, secondary`},
		{"url scheme", "OPS_REDIS_URL", "http://localhost", `OPS_REDIS_URL: invalid value "http": must be one of redis, rediss`},
		{"range", "OPS_DB_MAX_CONNS", "0", `OPS_DB_MAX_CONNS: must be at least 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			var c sample
			err := config.Load(&c)
			require.EqualError(t, err, tc.want)
			var inv *config.Invalid
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.env, inv.Var)
		})
	}
}

func TestLoadSecretFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte("s3cret\n"), 0o600))
	t.Setenv("OPS_TEST_TOKEN_FILE", path)
	var c sample
	require.NoError(t, config.Load(&c))
	require.Equal(t, "s3cret", c.Token, "trailing newline of the file is dropped")

	t.Setenv("OPS_TEST_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
	require.ErrorContains(t, config.Load(&sample{}), "OPS_TEST_TOKEN_FILE: cannot read file")
}

func TestUpstreamsValidate(t *testing.T) {
	t.Setenv("OPS_SITE_URL", "ftp://x")
	var u struct{ config.Upstreams }
	require.EqualError(t, config.Load(&u), `OPS_SITE_URL: invalid value "ftp": must be one of http, https`)
}

// TestInternalSecret: OPS_INTERNAL_SECRET may be empty (nothing may name the client), but a set
// one must be long enough not to be guessed; it may come from a file like any variable.
func TestInternalSecret(t *testing.T) {
	var c sample
	require.NoError(t, config.Load(&c))
	require.Empty(t, c.InternalSecret)

	t.Setenv("OPS_INTERNAL_SECRET", "short")
	err := config.Load(&sample{})
	var inv *config.Invalid
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "OPS_INTERNAL_SECRET", inv.Var)

	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte(strings.Repeat("ab", 32)+"\n"), 0o600))
	t.Setenv("OPS_INTERNAL_SECRET", "")
	os.Unsetenv("OPS_INTERNAL_SECRET")
	t.Setenv("OPS_INTERNAL_SECRET_FILE", file)
	require.NoError(t, config.Load(&c))
	require.Equal(t, strings.Repeat("ab", 32), c.InternalSecret)
}

func TestNetworks(t *testing.T) {
	got, err := config.Networks("OPS_X", []string{" 127.0.0.1", "", "::1 ", "  "})
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1", "::1"}, got)

	got, err = config.Networks("OPS_X", nil)
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = config.Networks("OPS_X", []string{"10.0.0.0/33"})
	require.EqualError(t, err, `OPS_X: invalid address or CIDR range "10.0.0.0/33"`)
}

// TestCredentialsGoIntoTheURLs: OPS_DATABASE_USER and OPS_DATABASE_PASSWORD(_FILE) replace the
// credentials of both database URLs, OPS_REDIS_USERNAME and OPS_REDIS_PASSWORD those of the Redis
// URL; a password needing escapes survives the round trip.
func TestCredentialsGoIntoTheURLs(t *testing.T) {
	t.Setenv("OPS_DATABASE_URL", "postgres://someone@db.example:5432/obsops?sslmode=require")
	t.Setenv("OPS_MAIN_DATABASE_URL", "postgres://main.example:5432/obsops")
	t.Setenv("OPS_DATABASE_USER", "obsops_catalog")
	file := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(file, []byte("p@ss/w:rd?#\n"), 0o600))
	t.Setenv("OPS_DATABASE_PASSWORD_FILE", file)
	t.Setenv("OPS_REDIS_URL", "redis://redis.example:6379/0")
	t.Setenv("OPS_REDIS_USERNAME", "catalog")
	t.Setenv("OPS_REDIS_PASSWORD", "r3dis")
	var c struct{ config.Common }
	require.NoError(t, config.Load(&c))
	for _, raw := range []string{c.DatabaseURL, c.MainDB()} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		pw, _ := u.User.Password()
		require.Equal(t, "obsops_catalog", u.User.Username())
		require.Equal(t, "p@ss/w:rd?#", pw)
	}
	require.Equal(t, "postgres://obsops_catalog:p%40ss%2Fw%3Ard%3F%23@db.example:5432/obsops?sslmode=require", c.DatabaseURL)
	require.Equal(t, "redis://catalog:r3dis@redis.example:6379/0", c.RedisURL)
}

// TestMainCredentialsReplaceTheServicesAtTheMain: OPS_MAIN_DATABASE_USER and
// OPS_MAIN_DATABASE_PASSWORD(_FILE) name the role used at the main site's database (a secondary's
// ingest: obsops_replay, decisions §45) while OPS_DATABASE_USER stays the one at the replica.
func TestMainCredentialsReplaceTheServicesAtTheMain(t *testing.T) {
	t.Setenv("OPS_SITE_TYPE", "secondary")
	t.Setenv("OPS_DATABASE_URL", "postgres://replica.example:5432/obsops")
	t.Setenv("OPS_MAIN_DATABASE_URL", "postgres://main.example:5432/obsops")
	t.Setenv("OPS_DATABASE_USER", "obsops_ingest")
	t.Setenv("OPS_DATABASE_PASSWORD", "ingest-password-0123")
	t.Setenv("OPS_MAIN_DATABASE_USER", "obsops_replay")
	file := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(file, []byte("replay-password-0123\n"), 0o600))
	t.Setenv("OPS_MAIN_DATABASE_PASSWORD_FILE", file)
	var c struct{ config.Common }
	require.NoError(t, config.Load(&c))
	require.Equal(t, "postgres://obsops_ingest:ingest-password-0123@replica.example:5432/obsops", c.DatabaseURL)
	require.Equal(t, "postgres://obsops_replay:replay-password-0123@main.example:5432/obsops", c.MainDB())
}
