package authn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
)

func TestScopesAreTheSpecList(t *testing.T) {
	var names []string
	for _, s := range authn.Scopes() {
		require.NotEmpty(t, s.Description)
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"read:observations", "write:observations", "read:data", "write:data",
		"read:instruments", "read:sources", "read:programs", "write:weather"}, names)
}

func TestValidScope(t *testing.T) {
	for s, want := range map[string]bool{
		"read:data": true, "write:observations": true, "read:*": true, "write:*": true,
		"read:everything": false, "admin:*": false, "*": false, "read": false, "": false, "READ:data": false,
	} {
		require.Equal(t, want, authn.ValidScope(s), s)
	}
}

func TestWildcardScopes(t *testing.T) {
	require.True(t, authn.ScopeGranted([]string{"read:*"}, "read:data"))
	require.True(t, authn.ScopeGranted([]string{"read:*"}, "read:programs"))
	require.False(t, authn.ScopeGranted([]string{"read:*"}, "write:data"))
	require.True(t, authn.ScopeGranted([]string{"write:data"}, "write:data"))
	require.False(t, authn.ScopeGranted(nil, "read:data"))
	require.Equal(t, []string{"write:data"}, authn.MissingScopes([]string{"read:*"}, []string{"read:data", "write:data"}))
	require.Empty(t, authn.MissingScopes([]string{"read:*", "write:*"}, []string{"read:data", "write:data"}))
}
