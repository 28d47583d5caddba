package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/config"
)

type siteSample struct {
	config.Common
	config.Site
}

// TestSiteDefaultsAndLimits: the envDefault values are DefaultSite, and Load rejects a site that is
// not physically meaningful, naming the variable (one Validate for every service embedding it).
func TestSiteDefaultsAndLimits(t *testing.T) {
	var c siteSample
	require.NoError(t, config.Load(&c))
	require.Equal(t, config.DefaultSite(), c.Site)

	cases := map[string]string{
		"OPS_SITE_LATITUDE_DEG":      "91",
		"OPS_SITE_LONGITUDE_DEG":     "-181",
		"OPS_SITE_ELEVATION_M":       "20000",
		"OPS_SITE_MIN_ELEVATION_DEG": "95",
		"OPS_SITE_MAX_ELEVATION_DEG": "91",
		"OPS_SUN_AVOIDANCE_DEG":      "-1",
		"OPS_SITE_PRESSURE_HPA":      "5000",
		"OPS_SITE_RELATIVE_HUMIDITY": "1.5",
		"OPS_SITE_WAVELENGTH_UM":     "0",
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			var c siteSample
			err := config.Load(&c)
			require.Error(t, err)
			require.Contains(t, err.Error(), name+":")
		})
	}
}
