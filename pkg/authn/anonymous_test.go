package authn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
)

func TestNeedsCredential(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/raw_data_files/bulk", true},
		{"POST", "/raw_data_files/", true},
		{"PUT", "/executed_obs_units/0192f1c8-0000-7000-8000-000000000001/finish", true},
		{"POST", "/observing_program", true},
		{"GET", "/health", false},
		{"GET", "/api/transfer/overview", false},
		{"POST", "/health", false},        // no such route: 404, not 401
		{"POST", "/no/such/route", false}, // likewise
		{"PUT", "/executed_obs_units//finish", false},
	} {
		require.Equal(t, c.want, authn.NeedsCredential(c.method, c.path), "%s %s", c.method, c.path)
	}
}
