package authtoken

import (
	"github.com/obsops/obsops/pkg/authn"
)

// Page is one page of a list (docs/api.md, "Conventions").
type Page[T any] struct {
	Items  []T   `json:"items"`
	Total  int64 `json:"total" doc:"Number of matching items across all pages."`
	Limit  int   `json:"limit"`
	Offset int   `json:"offset"`
}

// Caller is who performs a token operation: a signed-in user, or the admin command line.
type Caller struct {
	UserID int64 // 0 for the admin command line
	Name   string
	Admin  bool
}

// CallerOf returns the Caller of an authenticated request.
func CallerOf(p *authn.Principal) Caller {
	return Caller{UserID: p.UserID, Name: p.Username, Admin: p.IsAdmin()}
}

// CommandLineCaller is the `authtoken admin` command: an administrator with no user account.
func CommandLineCaller() Caller { return Caller{Name: "admin-cli", Admin: true} }

// Visibility limits an operation to the tokens of one user, or opens it to all (admins). The
// zero value matches no token.
type Visibility struct {
	AllUsers bool
	UserID   int64
}

// visibility is the one place deciding which tokens a caller may see and change.
func (c Caller) visibility() Visibility {
	if c.Admin {
		return Visibility{AllUsers: true}
	}
	return Visibility{UserID: c.UserID}
}
