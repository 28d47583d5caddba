package site_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/services/site"
)

// TestObservatoryURLSetting: OPS_OBSERVATORY_STATUS_URL is optional, an http(s) URL, and set at
// the main site only.
func TestObservatoryURLSetting(t *testing.T) {
	cfg := func(siteType, url string) *site.Config {
		c := &site.Config{WeatherRetentionDays: 400, WeatherPruneInterval: 3600e9, ObservatoryStatusURL: url}
		c.SiteType = siteType
		return c
	}
	require.NoError(t, cfg("main", "").Validate())
	require.NoError(t, cfg("secondary", "").Validate())
	require.NoError(t, cfg("main", "http://observatory:8080/buffer-stats").Validate())
	require.NoError(t, cfg("main", "https://observatory.example/buffer-stats").Validate())
	for _, c := range []*site.Config{cfg("main", "observatory:8080"), cfg("main", "ftp://observatory/buffer-stats"),
		cfg("secondary", "http://observatory:8080/buffer-stats")} {
		var inv *config.Invalid
		require.ErrorAs(t, c.Validate(), &inv, c.ObservatoryStatusURL)
		require.Equal(t, "OPS_OBSERVATORY_STATUS_URL", inv.Var)
	}
}
