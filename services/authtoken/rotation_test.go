package authtoken_test

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestSigningKeyRotation rotates the JWT signing key the documented way (new key active, old
// key in OPS_JWT_PREVIOUS_KEYS_FILE) and checks that nobody is logged out: JWTs signed by the
// old key keep working, directly and through the gateway, and the JWKS publishes both keys.
func TestSigningKeyRotation(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{})
	oldKey := s.SigningKeyFile
	oldKid := authn.KeyID(signingKey(t, oldKey).Public().(ed25519.PublicKey))
	c := &http.Client{Timeout: 10 * time.Second}

	kidOf := func(t *testing.T, tok string) string {
		parsed, _, err := jwt.NewParser().ParseUnverified(tok, &authn.Claims{})
		require.NoError(t, err)
		return parsed.Header["kid"].(string)
	}
	jwks := func(t *testing.T) []string {
		r := get(t, c, s.GatewayURL+"/.well-known/jwks.json", "")
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "public, max-age=300", r.Header.Get("Cache-Control"))
		var set authn.JWKSet
		r.JSON(t, &set)
		var kids []string
		for _, k := range set.Keys {
			require.Equal(t, "OKP", k.Kty)
			require.Equal(t, "Ed25519", k.Crv)
			require.Equal(t, "EdDSA", k.Alg)
			kids = append(kids, k.Kid)
		}
		return kids
	}
	meStatus := func(t *testing.T, base, tok string) int {
		return get(t, c, base+"/auth/me", tok).Status
	}

	old := s.JWT(t, "rita", "viewer")
	require.Equal(t, oldKid, kidOf(t, old))
	require.Equal(t, []string{oldKid}, jwks(t))

	newKey := testenv.SigningKey(t)
	newKid := authn.KeyID(signingKey(t, newKey).Public().(ed25519.PublicKey))
	restartAuthtoken(t, s, map[string]string{
		"OPS_JWT_SIGNING_KEY_FILE":   newKey,
		"OPS_JWT_PREVIOUS_KEYS_FILE": oldKey,
	})

	t.Run("after the rotation the old JWT still works and both keys are published", func(t *testing.T) {
		require.Equal(t, []string{newKid, oldKid}, jwks(t), "active key first")
		require.Equal(t, http.StatusOK, meStatus(t, s.URLs["authtoken"], old))
		require.Equal(t, http.StatusOK, meStatus(t, s.GatewayURL, old))
	})

	t.Run("new JWTs are signed with the new key", func(t *testing.T) {
		fresh := s.JWT(t, "rita") // the admin command reads the same configuration
		require.Equal(t, newKid, kidOf(t, fresh))
		require.Equal(t, http.StatusOK, meStatus(t, s.GatewayURL, fresh))
	})

	t.Run("once the old key is dropped its JWTs stop working", func(t *testing.T) {
		delete(s.Env, "OPS_JWT_PREVIOUS_KEYS_FILE")
		restartAuthtoken(t, s, nil)
		require.Equal(t, []string{newKid}, jwks(t))
		require.Equal(t, http.StatusUnauthorized, meStatus(t, s.GatewayURL, old))
	})
}
