package authn_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
)

// directoryOf writes entries as authtoken does and returns a fresh service-side copy.
func directoryOf(t *testing.T, r *testenv.RedisServer, entries ...authn.DirectoryEntry) *authn.Directory {
	t.Helper()
	rdb := r.Client()
	_, err := authn.WriteDirectory(context.Background(), rdb, entries)
	require.NoError(t, err)
	d := authn.NewDirectory(rdb, nil)
	t.Cleanup(d.Close)
	return d
}

func TestDirectoryCheck(t *testing.T) {
	r := testenv.Redis(t)
	now := time.Now()
	revokedAt := now.Unix() + 1 // a session revoked in this second, rounded up like authtoken does
	d := directoryOf(t, r,
		authn.DirectoryEntry{UserID: 1, Username: "alice", Active: true, Roles: []string{"admin", "viewer"}},
		authn.DirectoryEntry{UserID: 2, Username: "bob", Active: false, Roles: []string{"admin"}},
		authn.DirectoryEntry{UserID: 3, Username: "carol", Active: true, ValidAfter: revokedAt, Roles: []string{"viewer"}},
		authn.DirectoryEntry{UserID: 4, Username: "dave|x", Active: true, Roles: nil},
	)
	ctx := context.Background()
	later := now.Add(2 * time.Second)
	cases := []struct {
		name  string
		uid   int64
		sub   string
		iat   *time.Time
		roles []string
		want  []string
		err   error
	}{
		{"active admin", 1, "alice", &now, []string{"admin"}, []string{"admin"}, nil},
		{"uid and sub name different users", 1, "bob", &now, []string{"admin"}, nil, authn.ErrUserMismatch},
		{"unknown user", 99, "mallory", &now, []string{"admin"}, nil, authn.ErrUnknownUser},
		{"disabled user", 2, "bob", &now, []string{"admin"}, nil, authn.ErrUserDisabled},
		{"disabled user, API token", 2, "bob", nil, []string{"admin"}, nil, authn.ErrUserDisabled},
		{"session issued before the revocation", 3, "carol", &now, []string{"viewer"}, nil, authn.ErrSessionRevoked},
		{"session issued after the revocation", 3, "carol", &later, []string{"viewer"}, []string{"viewer"}, nil},
		{"API tokens have no sessions", 3, "carol", nil, []string{"viewer"}, []string{"viewer"}, nil},
		{"role taken away is dropped", 3, "carol", &later, []string{"admin", "viewer"}, []string{"viewer"}, nil},
		{"name with the separator", 4, "dave|x", &now, []string{"observer"}, []string{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			roles, err := d.Check(ctx, tc.uid, tc.sub, tc.iat, tc.roles)
			require.ErrorIs(t, err, tc.err)
			if tc.err == nil {
				require.Equal(t, tc.want, roles)
			}
		})
	}
}

// A change reaches a loaded copy by the announcement, and without it by polling.
func TestDirectoryFollowsChanges(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	alice := authn.DirectoryEntry{UserID: 1, Username: "alice", Active: true, Roles: []string{"admin"}}
	d := directoryOf(t, r, alice)
	roles, err := d.Check(ctx, 1, "alice", nil, []string{"admin"}) // loads the copy
	require.NoError(t, err)
	require.Equal(t, []string{"admin"}, roles)

	alice.Active = false
	start := time.Now()
	_, err = authn.WriteDirectory(ctx, r.Client(), []authn.DirectoryEntry{alice})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := d.Check(ctx, 1, "alice", nil, []string{"admin"})
		return err != nil
	}, 2*time.Second, 10*time.Millisecond, "announced change not applied")
	t.Logf("disable applied %s after it was written", time.Since(start))

	alice.Active = true
	_, err = authn.WriteDirectory(ctx, r.Client(), []authn.DirectoryEntry{alice})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := d.Check(ctx, 1, "alice", nil, []string{"admin"})
		return err == nil
	}, 2*time.Second, 10*time.Millisecond, "enabled again")

	// A lost announcement: the directory changes in Redis without a PUBLISH. The copy still
	// accepts alice (so no point lookup happens): only polling can bring the change.
	rdb := r.Client()
	require.NoError(t, rdb.HSet(ctx, contract.UserDirectoryKey, "1", "0|0|admin|alice").Err())
	require.NoError(t, rdb.Set(ctx, contract.UserDirectoryVersionKey, "written-without-announcement", 0).Err())
	start = time.Now()
	require.Eventually(t, func() bool {
		_, err := d.Check(ctx, 1, "alice", nil, []string{"admin"})
		return err != nil
	}, 3*time.Second, 20*time.Millisecond, "polling did not pick up the change")
	t.Logf("unannounced disable applied %s after it was written", time.Since(start))
}

// A copy that is behind Redis (a new user, a fresh grant) never refuses what Redis accepts:
// the disagreement triggers a point lookup.
func TestDirectoryLooksUpWhatItDoesNotKnow(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	d := directoryOf(t, r, authn.DirectoryEntry{UserID: 1, Username: "alice", Active: true, Roles: []string{"viewer"}})
	_, err := d.Check(ctx, 1, "alice", nil, nil)
	require.NoError(t, err)
	d.Close() // no more announcements or polling: only point lookups can help now

	rdb := r.Client()
	_, err = authn.WriteDirectory(ctx, rdb, []authn.DirectoryEntry{
		{UserID: 1, Username: "alice", Active: true, Roles: []string{"admin", "viewer"}},
		{UserID: 2, Username: "bob", Active: true, Roles: []string{"viewer"}},
	})
	require.NoError(t, err)
	roles, err := d.Check(ctx, 1, "alice", nil, []string{"admin"})
	require.NoError(t, err)
	require.Equal(t, []string{"admin"}, roles, "fresh grant")
	_, err = d.Check(ctx, 2, "bob", nil, []string{"viewer"})
	require.NoError(t, err, "new user")
}

// While Redis is down the last copy stays in force; a service that never loaded one accepts
// credentials as signed.
func TestDirectoryWithoutRedis(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	d := directoryOf(t, r, authn.DirectoryEntry{UserID: 1, Username: "alice", Active: false})
	var now atomic.Int64 // the test's clock, read by the directory's goroutine too
	now.Store(time.Now().UnixNano())
	d.Now = func() time.Time { return time.Unix(0, now.Load()) }
	_, err := d.Check(ctx, 1, "alice", nil, nil)
	require.ErrorIs(t, err, authn.ErrUserDisabled)
	r.Kill()
	now.Add(int64(time.Second)) // past the point-lookup spacing, so the lookup is tried (and fails)
	_, err = d.Check(ctx, 1, "alice", nil, nil)
	require.ErrorIs(t, err, authn.ErrUserDisabled, "the last copy stays in force")

	never := authn.NewDirectory(r.Client(), nil)
	t.Cleanup(never.Close)
	roles, err := never.Check(ctx, 1, "alice", nil, []string{"viewer"})
	require.NoError(t, err)
	require.Equal(t, []string{"viewer"}, roles)
}

// The verifier applies the directory: uid and sub must name the same user, and a disabled
// user's JWT is refused.
func TestJWTVerifierChecksTheUser(t *testing.T) {
	r := testenv.Redis(t)
	s := newSigner(t)
	v := verifier(authn.StaticKeys{s.kid(): s.pub})
	v.Users = directoryOf(t, r,
		authn.DirectoryEntry{UserID: 7, Username: "alice", Active: true, Roles: []string{"admin"}},
		authn.DirectoryEntry{UserID: 8, Username: "bob", Active: false, Roles: []string{"admin"}},
	)
	ctx := context.Background()
	_, err := v.Verify(ctx, s.sign(t, validClaims()))
	require.NoError(t, err)
	for name, mod := range map[string]func(jwt.MapClaims){
		"uid of another user": func(c jwt.MapClaims) { c["uid"] = 8 },
		"sub of another user": func(c jwt.MapClaims) { c["sub"] = "bob" },
		"disabled user":       func(c jwt.MapClaims) { c["uid"], c["sub"] = 8, "bob" },
		"unknown user":        func(c jwt.MapClaims) { c["uid"], c["sub"] = 9, "mallory" },
	} {
		t.Run(name, func(t *testing.T) {
			c := validClaims()
			mod(c)
			_, err := v.Verify(ctx, s.sign(t, c))
			require.ErrorIs(t, err, authn.ErrInvalidCredential)
		})
	}
}
