package catalog_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	pkgproblem "github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
)

// A ConflictError, also wrapped, is answered 409 with its detail and the input it names in errors[].
func TestConflictErrorIsA409NamingItsInput(t *testing.T) {
	err := fmt.Errorf("create: %w", &catalog.ConflictError{Location: "body.short_name", Message: `short_name "X" is taken by another program`})
	p := pkgproblem.From(err)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Equal(t, `short_name "X" is taken by another program`, p.Detail)
	require.Equal(t, []pkgproblem.Detail{{Location: "body.short_name", Message: `short_name "X" is taken by another program`}}, p.Errors)

	p = pkgproblem.From(&catalog.ConflictError{Message: "the source is used"})
	require.Equal(t, pkgproblem.Conflict, p.Kind())
	require.Empty(t, p.Errors)
}
