package authtoken

import (
	"errors"
	"time"
)

// User is a person who logged in through the identity provider, or a service account.
type User struct {
	ID          int64      `json:"id" db:"id"`
	Username    string     `json:"username" db:"username"`
	Email       string     `json:"email,omitempty" db:"email"`
	DisplayName string     `json:"display_name,omitempty" db:"display_name"`
	IsService   bool       `json:"is_service_account" db:"is_service"`
	IsActive    bool       `json:"is_active" db:"is_active"`
	Roles       []string   `json:"roles" db:"-"`
	CreatedAt   time.Time  `json:"created_at" db:"created_at"`
	LastLoginAt *time.Time `json:"last_login_at,omitempty" db:"last_login_at"`
}

// ErrNotFound means the requested record does not exist (or is not the caller's to see).
var ErrNotFound = errors.New("not found")

// ErrIdentityConflict means a login's username already belongs to another identity-provider
// account (another issuer or subject).
var ErrIdentityConflict = errors.New("username belongs to another identity-provider account")

// ValidUsername reports whether name can be a username: 1–255 printable characters without
// spaces or control characters.
func ValidUsername(name string) bool {
	if len(name) == 0 || len(name) > 255 {
		return false
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}
