package authn_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
)

func TestNewAPITokenFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := authn.NewAPIToken()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(tok.Raw, "ops_api_token_"))
		require.Len(t, tok.Raw, len("ops_api_token_")+43, "base64url of 32 bytes, unpadded")
		require.True(t, authn.WellFormedAPIToken(tok.Raw))
		require.Equal(t, authn.HashAPIToken(tok.Raw), tok.Hash)
		require.Regexp(t, `^[0-9a-f]{64}$`, tok.Hash)
		require.LessOrEqual(t, len(tok.Display), 16)
		require.True(t, strings.HasPrefix(tok.Raw, "ops_api_token_"+strings.TrimPrefix(tok.Display, "ops_")))
		require.False(t, seen[tok.Raw])
		seen[tok.Raw] = true
	}
}

func TestHashIsLowercaseHexSHA256OfTheFullString(t *testing.T) {
	// `printf x | sha256sum`, computed independently.
	require.Equal(t, "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", authn.HashAPIToken("x"))
}

func TestWellFormedAPIToken(t *testing.T) {
	good, _ := authn.NewAPIToken()
	secret := strings.TrimPrefix(good.Raw, authn.APITokenPrefix)
	cases := map[string]bool{
		good.Raw:                              true,
		"":                                    false,
		"ops_api_token_":                      false,
		"ops_api_token_" + secret[:42]:        false, // too short
		"ops_api_token_" + secret + "A":       false, // too long
		"ops_api_token_" + secret[:42] + "=":  false, // padding
		"ops_api_token_" + secret[:41] + "+/": false, // not URL-safe
		"ops_api_token_" + strings.Repeat("A", 42) + "B": false, // non-canonical last character
		"OPS_API_TOKEN_" + secret:                        false,
		"Bearer " + good.Raw:                             false,
		"eyJhbGciOiJFZERTQSJ9.e30.sig":                   false,
	}
	for in, want := range cases {
		require.Equal(t, want, authn.WellFormedAPIToken(in), "%q", in)
	}
}
