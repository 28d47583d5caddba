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

// `authtoken admin purge-token-cache` makes a change done in SQL by hand (which the token cache
// cannot see) take effect at once instead of after the cache TTL.
func TestAdminPurgeTokenCache(t *testing.T) {
	env := tokentest.New(t)
	cfg := &authtoken.Config{Common: config.Common{DatabaseURL: env.DatabaseURL, RedisURL: env.Redis.URL}}
	svc := env.Service()
	tok, err := svc.Create(context.Background(), env.User(t, "bob", authn.RoleViewer), authtoken.TokenSpec{Name: "script"})
	require.NoError(t, err)
	verify := func() error {
		_, err := svc.VerifyToken(context.Background(), authn.VerifyRequest{Token: tok.Secret})
		return err
	}
	require.NoError(t, verify()) // now cached
	_, err = env.DB.Exec(`UPDATE users SET is_active = false WHERE username = 'bob'`)
	require.NoError(t, err)
	require.NoError(t, verify(), "the cache cannot see SQL by hand")

	var out, errOut bytes.Buffer
	require.NoError(t, admin.Run(context.Background(), &admin.Env{Config: cfg, Stdout: &out, Stderr: &errOut}, []string{"purge-token-cache"}), errOut.String())
	require.Contains(t, out.String(), "token cache purged")
	require.ErrorIs(t, verify(), authn.ErrInvalidCredential, "after the purge the disabled user's token is refused")
}
