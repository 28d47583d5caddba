// Package directory publishes the user directory (pkg/authn's revocation.go) from authtoken:
// it writes the entries read from PostgreSQL to Redis, announces them, and installs them in
// this process's own copy at once. It implements authtoken.DirectoryPublisher.
package directory

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/authn"
)

// Publisher writes the directory to Redis and into Local.
type Publisher struct {
	Redis redis.UniversalClient
	// Local is this process's copy (its Authenticator's), updated even when Redis fails so
	// authtoken itself enforces every change at once; nil for the admin command.
	Local *authn.Directory
}

// Publish makes entries (every user) the directory.
func (p *Publisher) Publish(ctx context.Context, entries []authn.DirectoryEntry) error {
	version, err := authn.WriteDirectory(ctx, p.Redis, entries)
	if p.Local != nil {
		p.Local.Replace(version, entries)
	}
	return err
}
