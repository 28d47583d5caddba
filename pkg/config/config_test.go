package config_test

import (
	"os"
	"path/filepath"
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

// TestTrustedGatewaysList: OPS_TRUSTED_GATEWAYS entries are trimmed (a space after the comma is
// common) and empty ones dropped, as for the gateway's OPS_TRUSTED_PROXIES; a bad entry is refused
// naming the variable.
func TestTrustedGatewaysList(t *testing.T) {
	t.Setenv("OPS_TRUSTED_GATEWAYS", "10.0.0.0/8, fc00::/7 ,192.168.1.1,")
	var c sample
	require.NoError(t, config.Load(&c))
	require.Equal(t, []string{"10.0.0.0/8", "fc00::/7", "192.168.1.1"}, c.TrustedGateways)

	t.Setenv("OPS_TRUSTED_GATEWAYS", "10.0.0.0/8, gateway.local")
	err := config.Load(&sample{})
	require.EqualError(t, err, `OPS_TRUSTED_GATEWAYS: invalid address or CIDR range "gateway.local"`)
	var inv *config.Invalid
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "OPS_TRUSTED_GATEWAYS", inv.Var)
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
