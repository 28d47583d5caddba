package authtoken_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
)

// Two admins disabling each other at the same moment: one succeeds, the other gets
// ErrLastAdmin, so an active admin always remains.
func TestLastAdminHoldsUnderConcurrency(t *testing.T) {
	env := tokentest.New(t)
	users := env.UserService()
	ctx := context.Background()
	for round := range 5 {
		a := env.User(t, "a"+string(rune('0'+round)), authn.RoleAdmin)
		b := env.User(t, "b"+string(rune('0'+round)), authn.RoleAdmin)
		// Every other admin of earlier rounds is disabled by now; these two are the only ones.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		off := false
		for i, pair := range [][2]authtoken.Caller{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = users.Update(ctx, pair[0], pair[1].UserID, authtoken.UserChanges{Active: &off})
			}()
		}
		wg.Wait()
		ok, last := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, authtoken.ErrLastAdmin):
				last++
			default:
				t.Fatal(err)
			}
		}
		require.Equal(t, [2]int{1, 1}, [2]int{ok, last}, "round %d: %v", round, errs)
		// Leave exactly no active admin of this round's pair for the next: disable the
		// survivor with a new admin present.
		c := env.User(t, "c"+string(rune('0'+round)), authn.RoleAdmin)
		for _, u := range []authtoken.Caller{a, b} {
			if _, err := users.Update(ctx, c, u.UserID, authtoken.UserChanges{Active: &off}); err != nil {
				require.NoError(t, err)
			}
		}
		_, err := users.Update(ctx, c, c.UserID, authtoken.UserChanges{Active: &off})
		require.ErrorIs(t, err, authtoken.ErrLastAdmin)
		roles := []string{authn.RoleViewer}
		_, err = users.Update(ctx, c, c.UserID, authtoken.UserChanges{Roles: &roles})
		require.ErrorIs(t, err, authtoken.ErrLastAdmin)
		env.Exec(t, `UPDATE users SET is_active = false WHERE id = $1`, c.UserID)
	}
}

// Only admins administer users; an update needs something to change and known roles.
func TestUserServiceRules(t *testing.T) {
	env := tokentest.New(t)
	users := env.UserService()
	ctx := context.Background()
	admin := env.User(t, "admin", authn.RoleAdmin)
	viewer := env.User(t, "viewer", authn.RoleViewer)
	off := false
	_, err := users.Update(ctx, viewer, admin.UserID, authtoken.UserChanges{Active: &off})
	require.ErrorIs(t, err, authtoken.ErrForbidden)
	_, err = users.List(ctx, viewer, authtoken.UserListQuery{})
	require.ErrorIs(t, err, authtoken.ErrForbidden)
	_, err = users.Get(ctx, viewer, admin.UserID)
	require.ErrorIs(t, err, authtoken.ErrForbidden)
	_, err = users.Update(ctx, admin, viewer.UserID, authtoken.UserChanges{})
	var input *problem.FieldError
	require.ErrorAs(t, err, &input)
	roles := []string{"viewer", "root"}
	_, err = users.Update(ctx, admin, viewer.UserID, authtoken.UserChanges{Roles: &roles})
	require.ErrorAs(t, err, &input)
	require.Equal(t, "body.roles[1]", input.Location)
	_, err = users.Update(ctx, admin, 999999, authtoken.UserChanges{Active: &off})
	require.ErrorIs(t, err, problem.ErrNotFound)
	// Nothing changed, nothing audited.
	var n int
	require.NoError(t, env.DB.Get(&n, `SELECT count(*) FROM user_audit WHERE action <> 'grant_roles'`))
	require.Zero(t, n)
}

// slowPublisher publishes after a pause, like a replica on a loaded machine: it widens the
// gap between reading the users and writing them.
type slowPublisher struct{ authtoken.DirectoryPublisher }

func (p slowPublisher) Publish(ctx context.Context, entries []authn.DirectoryEntry) error {
	time.Sleep(15 * time.Millisecond)
	return p.DirectoryPublisher.Publish(ctx, entries)
}

// Publishers racing (other replicas' periodic syncs) never overwrite the directory with a
// snapshot read before a change: once a change is answered, Redis holds it, and keeps it.
func TestDirectoryPublishersKeepOrder(t *testing.T) {
	env := tokentest.New(t)
	users := env.UserService()
	replica := env.UserService()
	replica.Directory = slowPublisher{replica.Directory}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = replica.Sync(ctx)
			}
		}()
	}
	inRedis := func(id int64) bool {
		found, err := env.RDB.HExists(context.Background(), contract.UserDirectoryKey, strconv.FormatInt(id, 10)).Result()
		require.NoError(t, err)
		return found
	}
	var ids []int64
	for i := range 10 {
		u, _, err := users.Ensure(context.Background(), fmt.Sprintf("user%d", i), false)
		require.NoError(t, err)
		require.True(t, inRedis(u.ID), "user %d missing from the directory right after it was created", i)
		ids = append(ids, u.ID)
	}
	cancel()
	wg.Wait() // every replica's write has landed
	for i, id := range ids {
		require.True(t, inRedis(id), "user %d lost by a stale write", i)
	}
}
