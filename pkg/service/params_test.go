package service_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/migrations"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestParamsPostgresWouldRefuse: query and path values with NUL or invalid UTF-8, and NaN or
// infinite numbers, get 422 naming the parameter, before the handler runs; good values pass.
func TestParamsPostgresWouldRefuse(t *testing.T) {
	base, _, _ := start(t, migrations.Latest(), testenv.Redis(t).URL, 0)
	for _, c := range []struct{ path, location string }{
		{"/near/x?ra=NaN", "query.ra"},
		{"/near/x?ra=Inf", "query.ra"},
		{"/near/x?ra=-infinity", "query.ra"},
		{"/near/x?ra=1&filter=a%00b", "query.filter"},
		{"/near/x?ra=1&filter=%ff%fe", "query.filter"},
	} {
		resp, err := http.Get(base + c.path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s: %s", c.path, body)
		var p struct {
			Errors []struct {
				Location string `json:"location"`
			} `json:"errors"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		require.Len(t, p.Errors, 1, "%s", body)
		require.Equal(t, c.location, p.Errors[0].Location, "%s", c.path)
	}
	// Path values reach handlers as sent (not unescaped), so %00 there is three characters.
	resp, err := http.Get(base + "/near/caf%C3%A9?ra=-1.5e2&filter=nan")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.JSONEq(t, `{"name":"caf%C3%A9 -150 nan"}`, string(body), "a text parameter may say nan")
}
