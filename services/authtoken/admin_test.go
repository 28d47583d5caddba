package authtoken_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/admin"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
)

// `authtoken admin grant-role` prints the roles the user holds afterwards (sorted, each once),
// and `issue-jwt` without --roles puts the user's roles in the JWT.
func TestAdminGrantRoleAndIssueJWTRoles(t *testing.T) {
	env := tokentest.New(t)
	env.User(t, "alice", authn.RoleViewer)
	key, err := os.ReadFile(testenv.SigningKey(t))
	require.NoError(t, err)
	cfg := &authtoken.Config{
		Common:        config.Common{DatabaseURL: env.DatabaseURL, RedisURL: env.Redis.URL},
		JWTSigningKey: string(key), JWTTTL: time.Hour,
	}
	cfg.JWTIssuer, cfg.JWTAudience = "obsops", "obsops"
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		require.NoError(t, admin.Run(context.Background(), &admin.Env{Config: cfg, Stdout: &out, Stderr: &errOut}, args),
			"%v: %s", args, errOut.String())
		return out.String()
	}

	require.Equal(t, "user alice now has roles observer,viewer\n",
		run("grant-role", "--user", "alice", "--roles", "viewer,observer"), "a role held already is listed once")
	require.Equal(t, "user alice now has roles observer,viewer\n",
		run("grant-role", "--user", "alice", "--roles", "observer"))

	var claims authn.Claims
	_, _, err = jwt.NewParser().ParseUnverified(strings.TrimSpace(run("issue-jwt", "--user", "alice")), &claims)
	require.NoError(t, err)
	require.Equal(t, "alice", claims.Subject)
	require.Equal(t, []string{"observer", "viewer"}, claims.Roles)
}
