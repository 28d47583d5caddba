// Package redisacl holds the Redis ACL users of obsops (users.acl: one per service and one for
// KEDA, each allowed only its own key patterns, channels and commands) and applies them to a
// Redis. The tests (pkg/testenv) apply them to every Redis they start; `make up` and the
// Kubernetes Redis read the same file (docs/operations.md, "Redis users").
package redisacl

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed users.acl
var usersFile string

// File is users.acl as shipped: the users' rules without passwords, in Redis' ACL file syntax.
func File() string { return usersFile }

// User is one ACL user: its name and its rules (the words after the name).
type User struct {
	Name  string
	Rules []string
}

// Users are the users of File, in its order.
func Users() []User {
	var out []User
	for _, line := range strings.Split(usersFile, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			continue
		}
		out = append(out, User{Name: f[1], Rules: f[2:]})
	}
	return out
}

// Apply creates or replaces every user of File on rdb (which must be allowed ACL SETUSER), each
// with the password passwords gives it; a user without one is skipped. Each user is reset first,
// so applying again after a change of the file leaves exactly the file's rules (Redis merges a
// selector's words, "(" ... ")", back into one rule).
func Apply(ctx context.Context, rdb redis.UniversalClient, passwords map[string]string) error {
	for _, u := range Users() {
		pw, ok := passwords[u.Name]
		if !ok {
			continue
		}
		args := []any{"ACL", "SETUSER", u.Name, "reset"}
		for _, r := range u.Rules {
			args = append(args, r)
		}
		args = append(args, ">"+pw)
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redis user %s: %w", u.Name, err)
		}
	}
	return nil
}
