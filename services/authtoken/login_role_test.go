package authtoken_test

import (
	"database/sql"
	"net"
	"os/exec"
	"testing"

	"github.com/oauth2-proxy/mockoidc"
	"github.com/stretchr/testify/require"

	_ "github.com/lib/pq"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestLoginDefaultRole: with OPS_LOGIN_DEFAULT_ROLE=observer an account created by a first login
// is an observer (not a viewer), the bootstrap admin gets admin besides, and a returning user's
// roles are not touched by the setting.
func TestLoginDefaultRole(t *testing.T) {
	idp, err := mockoidc.NewServer(nil)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, idp.Start(ln, nil))
	t.Cleanup(func() { _ = idp.Shutdown() })

	s := testenv.StartSuite(t, testenv.SuiteOptions{Skip: []string{"authtoken"}})
	restartAuthtoken(t, s, map[string]string{
		"OPS_OIDC_ISSUER":        idp.Issuer(),
		"OPS_OIDC_CLIENT_ID":     idp.ClientID,
		"OPS_OIDC_CLIENT_SECRET": idp.ClientSecret,
		"OPS_OIDC_REDIRECT_URL":  s.GatewayURL + "/idp/callback",
		"OPS_BOOTSTRAP_ADMINS":   "boss",
		"OPS_LOGIN_DEFAULT_ROLE": "observer",
	})
	f := &loginFlow{suite: s, idp: idp, browser: browser(t)}

	first, _ := f.login(t, person{sub: "sub-olga", username: "olga", email: "olga@example.org", name: "Olga"})
	require.Equal(t, []string{"observer"}, first.User.Roles, "the configured default role, not viewer")
	require.Equal(t, []string{"observer"}, f.me(t, first.AccessToken).User.Roles)
	boss, _ := f.login(t, person{sub: "sub-boss", username: "boss", email: "boss@example.org", name: "Boss"})
	require.Equal(t, []string{"admin", "observer"}, boss.User.Roles)

	// A returning user keeps the roles an admin gave: the default applies to new accounts only.
	db, err := sql.Open("postgres", s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`DELETE FROM user_roles WHERE user_id = $1`, first.User.ID)
	require.NoError(t, err)
	again, _ := f.login(t, person{sub: "sub-olga", username: "olga", email: "olga@example.org", name: "Olga"})
	require.Empty(t, again.User.Roles)
}

// TestLoginDefaultRoleValidated: a default role other than viewer or observer stops authtoken at
// start-up with one line naming the variable.
func TestLoginDefaultRoleValidated(t *testing.T) {
	for _, v := range []string{"admin", "astronomer"} {
		cmd := exec.Command(testenv.Binary(t, "authtoken"))
		cmd.Env = []string{"OPS_LOGIN_DEFAULT_ROLE=" + v, "OPS_DATABASE_URL=postgres://x@127.0.0.1:1/x"}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, v)
		require.Contains(t, string(out), "OPS_LOGIN_DEFAULT_ROLE", v)
		require.Contains(t, string(out), "must be viewer or observer", v)
	}
}
