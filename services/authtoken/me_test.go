package authtoken_test

import (
	"database/sql"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/testenv"
)

// TestMe checks /auth/me for both kinds of credential, directly and through the gateway: the
// user as stored now, how the request authenticated, the API token's id and scopes, the JWT's
// expiry; and 401 once the user is gone.
func TestMe(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	session := s.JWT(t, "tom", "observer")
	c := &http.Client{Timeout: 10 * time.Second}

	// The API token comes from the real endpoint, as a user would make it.
	req, err := http.NewRequest(http.MethodPost, s.GatewayURL+"/api/tokens/",
		strings.NewReader(`{"name":"me test","scopes":["read:data","read:sources"],"expires_in_days":7}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+session)
	req.Header.Set("Content-Type", "application/json")
	r := do(t, c, req)
	require.Equal(t, http.StatusCreated, r.Status, "POST /api/tokens/: %s", r.Body)
	var created struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	r.JSON(t, &created)
	require.True(t, strings.HasPrefix(created.Token, "ops_api_token_"))

	for _, base := range []string{s.URLs["authtoken"], s.GatewayURL} {
		r := get(t, c, base+"/auth/me", session)
		require.Equal(t, http.StatusOK, r.Status, "jwt via %s: %s", base, r.Body)
		var m me
		r.JSON(t, &m)
		require.Equal(t, "jwt", m.AuthenticatedBy)
		require.Equal(t, "tom", m.User.Username)
		require.Equal(t, []string{"observer"}, m.User.Roles)
		require.False(t, m.User.IsServiceAccount)
		require.Nil(t, m.Token)
		require.NotNil(t, m.ExpiresAt)
		require.WithinDuration(t, time.Now().Add(8*time.Hour), *m.ExpiresAt, time.Minute)
		require.Equal(t, "no-store", r.Header.Get("Cache-Control"))

		r = get(t, c, base+"/auth/me", created.Token)
		require.Equal(t, http.StatusOK, r.Status, "api token via %s: %s", base, r.Body)
		m = me{}
		r.JSON(t, &m)
		require.Equal(t, "api_token", m.AuthenticatedBy)
		require.Equal(t, "tom", m.User.Username)
		require.Equal(t, []string{"observer"}, m.User.Roles)
		require.NotNil(t, m.Token)
		require.Equal(t, created.ID, m.Token.ID)
		require.ElementsMatch(t, []string{"read:data", "read:sources"}, m.Token.Scopes)
		require.Nil(t, m.ExpiresAt)
	}

	t.Run("roles are read fresh, not from the JWT", func(t *testing.T) {
		s.Admin(t, "grant-role", "--user", "tom", "--roles", "admin")
		r := get(t, c, s.GatewayURL+"/auth/me", session)
		require.Equal(t, http.StatusOK, r.Status)
		var m me
		r.JSON(t, &m)
		require.Equal(t, []string{"admin", "observer"}, m.User.Roles)
	})

	t.Run("a deleted user's still-valid JWT gets 401", func(t *testing.T) {
		db, err := sql.Open("postgres", s.DatabaseURL)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(`DELETE FROM users WHERE username = 'tom'`)
		require.NoError(t, err)
		for _, tok := range []string{session, created.Token} {
			r := get(t, c, s.GatewayURL+"/auth/me", tok)
			require.Equal(t, http.StatusUnauthorized, r.Status, "body: %s", r.Body)
			require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer"))
		}
	})
}
