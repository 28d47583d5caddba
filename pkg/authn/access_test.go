package authn_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
)

// specEndpoints are the endpoints of the interface contract (docs/api.md) with their full paths.
func specEndpoints() []string {
	return []string{
		"GET /api/transfer/overview", "GET /api/transfer/raw-packages", "GET /api/transfer/transfer-packages",
		"GET /api/transfer/ws/overview", "GET /api/transfer/failure-history/{operation_type}/{operation_id}",
		"POST /api/transfer/operation/{kind}/{id}/reset", "POST /api/transfer/operation/{kind}/reset-all-failed",
		"POST /api/transfer/raw-data-package/{id}/reconcile", "POST /api/transfer/raw-data-package/reconcile-inconsistent",
		"POST /api/transfer/data-transfer/{id}/reset", "POST /api/transfer/long-term-archive/{id}/reset",
		"POST /api/transfer/data-transfer/reset-all-failed", "POST /api/transfer/long-term-archive/reset-all-failed",
		"GET /observing_program/", "POST /observing_program/", "GET /observing_program/{id}", "PUT /observing_program/{id}",
		"DELETE /observing_program/{id}", "GET /sources/", "GET /sources/{id}/chip", "GET /sources/{id}/details",
		"POST /sources/resolve", "GET /visibility/{source_id}", "GET /visibility/heatmap", "GET /visibility/plot", "POST /visibility/precalculate",
		"POST /executed_obs_units/start", "PUT /executed_obs_units/{id}/finish", "GET /executed_obs_units/{obs_unit_id}",
		"POST /raw_data_files/", "POST /raw_data_files/bulk", "PUT /raw_data_files/{id}", "GET /raw_data_files/{id}",
		"POST /raw_data_package/", "GET /raw_data_package/{id}", "PUT /raw_data_package/{id}/finalize",
		"GET /idp/login", "GET /idp/callback", "GET /auth/me", "GET /api/tokens/scopes", "POST /api/tokens/",
		"GET /api/tokens/", "GET /api/tokens/{id}", "PUT /api/tokens/{id}", "GET /api/tokens/{id}/usage",
		"POST /api/tokens/{id}/regenerate", "DELETE /api/tokens/{id}", "POST /api/tokens/bulk-revoke",
		"GET /api/tokens/export", "POST /api/tokens/service",
		"GET /api/site/info", "GET /health", "GET /buffer-stats", "GET /api/site/weather", "POST /api/site/weather",
	}
}

func TestAccessTableCoversTheSpec(t *testing.T) {
	table := authn.Access()
	for _, e := range specEndpoints() {
		_, ok := table[e]
		require.True(t, ok, "SPEC endpoint %s has no access rule", e)
	}
}

func TestAccessTableFollowsDesign(t *testing.T) {
	table := authn.Access()
	for key, r := range table {
		method, path, _ := strings.Cut(key, " ")
		switch {
		case r.Anonymous:
			require.Contains(t, []string{"/api/transfer/overview", "/idp/login", "/idp/callback", "/idp/token", "/.well-known/jwks.json",
				"/api/site/info", "/api/site/weather", "/health", "/buffer-stats", "/api/site/observatory"}, path, "only public endpoints are anonymous")
		case strings.Contains(path, "reset") || strings.Contains(path, "reconcile") || path == "/visibility/precalculate" ||
			path == "/api/tokens/service" || path == "/api/tokens/audit" || path == "/api/tokens/service/{username}/bindings":
			require.Equal(t, authn.Roles(authn.RoleAdmin), r, "%s is admin-only (JWT)", key)
		case key == "POST /api/site/weather":
			require.Equal(t, authn.AdminOrServiceAccount("write:weather"), r, key)
		case path == "/executed_obs_units/start" || path == "/executed_obs_units/{id}/finish":
			require.Equal(t, authn.ServiceAccount("write:observations"), r, key)
		case strings.HasPrefix(path, "/raw_data_files/") && method != "GET",
			strings.HasPrefix(path, "/api/transfer/agent/"):
			require.Equal(t, authn.ServiceAccount("write:data"), r, key)
		case strings.HasPrefix(path, "/raw_data_package/") && method != "GET":
			// Issue 24: packages are an instrument's (ingest checks its bindings) or an admin's.
			require.Equal(t, authn.AdminOrServiceAccount("write:data"), r, key)
		case strings.HasPrefix(path, "/api/tokens/"), strings.HasPrefix(path, "/api/transfer/"):
			require.False(t, r.Token, "%s needs a session JWT", key)
			require.True(t, r.JWT, key)
		}
		if r.Token {
			for _, s := range r.Scopes {
				require.True(t, authn.ValidScope(s), "%s: scope %s", key, s)
			}
		}
	}
}

func TestRuleForPanicsOnUnlistedRoute(t *testing.T) {
	require.Panics(t, func() { authn.RuleFor("GET", "/not/in/table") })
	require.Equal(t, authn.Anonymous(), authn.RuleFor("GET", "/health"))
}
