package authn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/pkg/contract"
)

// The user directory: what every service knows about every user, so that disabling a user or
// taking a role away takes effect everywhere within seconds although session JWTs are verified
// locally and live for hours.
//
// authtoken, the only writer of the users table, writes the directory from PostgreSQL into
// Redis (contract.UserDirectoryKey) after every change to a user and every
// DirectorySyncInterval (so a flushed or restarted Redis loses nothing), and announces each new
// version on contract.UserDirectoryChannel. Every service's Directory holds an in-process copy,
// reloaded when the announcement arrives and, in case one is missed, when polling every
// DirectoryPollInterval sees another version.
const (
	DirectorySyncInterval = 2 * time.Second // authtoken rewrites it from PostgreSQL
	DirectoryPollInterval = time.Second     // services compare versions
)

// The Redis names of the directory.
const (
	directoryKey        = contract.UserDirectoryKey
	directoryVersionKey = contract.UserDirectoryVersionKey
	directoryChannel    = contract.UserDirectoryChannel
)

// Bounds of the directory's Redis calls and of point lookups of one user.
const (
	directoryTimeout   = time.Second
	lookupTimeout      = 200 * time.Millisecond
	lookupEvery        = 500 * time.Millisecond // at most one point lookup per user in this span
	directoryWarnEvery = 30 * time.Second
)

// DirectoryEntry is what the services know about one user.
type DirectoryEntry struct {
	UserID   int64
	Username string
	Active   bool
	// ValidAfter (unix seconds): session JWTs issued before it are refused; 0 when never set.
	ValidAfter int64
	Roles      []string // sorted
}

// encode is the entry's form in the Redis hash: active|valid-after|roles|username (usernames
// may contain '|', so the name comes last).
func (e DirectoryEntry) encode() string {
	active := "0"
	if e.Active {
		active = "1"
	}
	return active + "|" + strconv.FormatInt(e.ValidAfter, 10) + "|" + strings.Join(e.Roles, ",") + "|" + e.Username
}

func decodeEntry(uid int64, s string) (DirectoryEntry, error) {
	parts := strings.SplitN(s, "|", 4)
	if len(parts) != 4 {
		return DirectoryEntry{}, fmt.Errorf("user directory: malformed entry %q", s)
	}
	va, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return DirectoryEntry{}, fmt.Errorf("user directory: malformed entry %q", s)
	}
	e := DirectoryEntry{UserID: uid, Active: parts[0] == "1", ValidAfter: va, Username: parts[3]}
	if parts[2] != "" {
		e.Roles = strings.Split(parts[2], ",")
	}
	return e, nil
}

// digest is the version of a directory's content: equal content, equal version.
func digest(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k + "=" + fields[k] + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// WriteDirectory replaces the directory in Redis with entries (the whole users table) and
// announces the new version, unless Redis already holds exactly this content. It returns the
// version (also when Redis failed). Only authtoken (and its admin command) call it, after reading entries from
// PostgreSQL.
func WriteDirectory(ctx context.Context, rdb redis.UniversalClient, entries []DirectoryEntry) (string, error) {
	fields := make(map[string]string, len(entries))
	for _, e := range entries {
		fields[strconv.FormatInt(e.UserID, 10)] = e.encode()
	}
	version := digest(fields)
	current, err := rdb.Get(ctx, directoryVersionKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return version, err
	}
	if current == version {
		return version, nil
	}
	tmp := directoryKey + ":new" // same hash tag
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, tmp)
		if len(fields) == 0 {
			p.Del(ctx, directoryKey)
		} else {
			p.HSet(ctx, tmp, fields)
			p.Rename(ctx, tmp, directoryKey)
		}
		p.Set(ctx, directoryVersionKey, version, 0)
		p.Publish(ctx, directoryChannel, version)
		return nil
	})
	return version, err
}

// Directory is a service's in-process copy of the user directory (see above). It is
// loaded on first use and then kept current by pub/sub and polling for the life of the
// process (Close stops it). While Redis is unreachable the last copy stays in force.
//
// Check applies it to a verified credential. When the copy would refuse or restrict a
// credential (unknown user, name mismatch, disabled, session ended, role taken away), the
// user's entry is first read again from Redis (at most once per user per lookupEvery), so a
// copy that missed a very recent change (a new user, a re-enabled one, a fresh grant) never
// refuses a credential that Redis already accepts.
type Directory struct {
	// Now is the clock of point-lookup spacing (nil: time.Now); set it before first use.
	Now func() time.Time

	rdb redis.UniversalClient
	log *slog.Logger

	start  sync.Once
	cancel context.CancelFunc
	loaded chan struct{} // closed after the first load attempt

	mu      sync.RWMutex
	users   map[int64]DirectoryEntry
	version string
	known   bool                // a copy was loaded (from Redis or Replace)
	looked  map[int64]time.Time // last point lookup per user
	warned  time.Time
}

// NewDirectory returns the directory on rdb; nothing runs until its first use.
func NewDirectory(rdb redis.UniversalClient, log *slog.Logger) *Directory {
	return &Directory{rdb: rdb, log: log, loaded: make(chan struct{}),
		users: map[int64]DirectoryEntry{}, looked: map[int64]time.Time{}}
}

// Replace installs entries as the current copy (authtoken, right after writing them).
func (d *Directory) Replace(version string, entries []DirectoryEntry) {
	users := make(map[int64]DirectoryEntry, len(entries))
	for _, e := range entries {
		users[e.UserID] = e
	}
	d.mu.Lock()
	d.users, d.version, d.known = users, version, true
	d.mu.Unlock()
}

// Close stops the background refresh.
func (d *Directory) Close() {
	d.start.Do(func() { close(d.loaded) }) // never started: nothing to stop
	if d.cancel != nil {
		d.cancel()
	}
}

// ensureStarted loads the copy once (waiting at most directoryTimeout) and starts the refresh.
func (d *Directory) ensureStarted() {
	d.start.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		go d.run(ctx)
	})
	select {
	case <-d.loaded: // loaded: the hot path, without a timer
		return
	default:
	}
	t := time.NewTimer(directoryTimeout)
	defer t.Stop()
	select {
	case <-d.loaded:
	case <-t.C:
	}
}

// run keeps the copy current: a reload on every announcement and whenever the version in
// Redis differs from the copy's (checked every DirectoryPollInterval).
func (d *Directory) run(ctx context.Context) {
	d.reload(ctx, "")
	close(d.loaded)
	sub := d.rdb.Subscribe(ctx, directoryChannel)
	defer sub.Close()
	msgs := sub.Channel()
	tick := time.NewTicker(DirectoryPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			d.reload(ctx, m.Payload)
		case <-tick.C:
			d.reload(ctx, "")
		}
	}
}

// reload reads the directory when Redis holds another version than the copy (announced is the
// version just announced, if any).
func (d *Directory) reload(ctx context.Context, announced string) {
	d.mu.RLock()
	have := d.version
	d.mu.RUnlock()
	if announced != "" && announced == have {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, directoryTimeout)
	defer cancel()
	version, err := d.rdb.Get(ctx, directoryVersionKey).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return // not written yet, or Redis lost it: keep the copy until authtoken rewrites it
	case err != nil:
		d.warn("user directory: Redis unavailable, the last copy stays in force", err)
		return
	case version == have:
		return
	}
	// Read both in one transaction so the version names exactly this content.
	cmds, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, directoryVersionKey)
		p.HGetAll(ctx, directoryKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		d.warn("user directory: reload failed, the last copy stays in force", err)
		return
	}
	got := cmds[0].(*redis.StringCmd).Val()
	fields := cmds[1].(*redis.MapStringStringCmd).Val()
	users := make(map[int64]DirectoryEntry, len(fields))
	for k, v := range fields {
		uid, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			continue
		}
		e, err := decodeEntry(uid, v)
		if err != nil {
			d.warn("user directory: skipping an entry", err)
			continue
		}
		users[uid] = e
	}
	d.mu.Lock()
	d.users, d.version, d.known = users, got, true
	d.mu.Unlock()
}

// now reads the directory's clock.
func (d *Directory) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Directory) warn(msg string, err error) {
	d.mu.Lock()
	now := d.now()
	quiet := now.Sub(d.warned) < directoryWarnEvery
	if !quiet {
		d.warned = now
	}
	d.mu.Unlock()
	if !quiet && d.log != nil {
		d.log.Warn(msg, "error", err)
	}
}

// Errors of Check: the credential is valid as signed, but its user may no longer use it.
var (
	ErrUnknownUser     = errors.New("no such user")
	ErrUserMismatch    = errors.New("uid and sub name different users")
	ErrUserDisabled    = errors.New("user is disabled")
	ErrSessionRevoked  = errors.New("session ended: issued before the user's sessions were revoked")
	errDirectoryAbsent = errors.New("user directory not loaded")
)

// Check applies the directory to a verified credential of user uid named name, carrying roles
// and, for a session JWT, issued at issuedAt (nil for API tokens). It returns the roles the
// credential may use now (those of roles the user still holds) or why it is refused
// (ErrUnknownUser, ErrUserMismatch, ErrUserDisabled, ErrSessionRevoked).
//
// Before the first copy could be loaded (Redis unreachable since start) it refuses nothing:
// the signature still holds, and refusing every credential would stop the suite with Redis.
func (d *Directory) Check(ctx context.Context, uid int64, name string, issuedAt *time.Time, roles []string) ([]string, error) {
	d.ensureStarted()
	d.mu.RLock()
	e, found := d.users[uid]
	known := d.known
	d.mu.RUnlock()
	kept, err := judge(e, found, name, issuedAt, roles)
	if err == nil && len(kept) == len(roles) {
		return kept, nil
	}
	// The copy refuses or restricts: make sure it is not just behind.
	if fresh, ok, lerr := d.lookup(ctx, uid); lerr == nil {
		e, found, known = fresh, ok, true
		kept, err = judge(e, found, name, issuedAt, roles)
	} else if !errors.Is(lerr, errLookupSkipped) && !known {
		d.warn("user directory: unavailable, credentials are accepted as signed", lerr)
		return roles, nil
	}
	if !known {
		return roles, nil
	}
	return kept, err
}

// judge decides with entry e (found: whether the user exists).
func judge(e DirectoryEntry, found bool, name string, issuedAt *time.Time, roles []string) ([]string, error) {
	switch {
	case !found:
		return nil, ErrUnknownUser
	case e.Username != name:
		return nil, ErrUserMismatch
	case !e.Active:
		return nil, ErrUserDisabled
	case issuedAt != nil && issuedAt.Unix() < e.ValidAfter:
		return nil, ErrSessionRevoked
	}
	for i, r := range roles {
		if !slices.Contains(e.Roles, r) { // a role taken away: keep only those still held
			kept := slices.Clone(roles[:i])
			for _, r := range roles[i+1:] {
				if slices.Contains(e.Roles, r) {
					kept = append(kept, r)
				}
			}
			if kept == nil {
				kept = []string{}
			}
			return kept, nil
		}
	}
	return roles, nil // all still held: the common case allocates nothing
}

var errLookupSkipped = errors.New("looked up a moment ago")

// lookup reads one user's entry from Redis into the copy (found false: no such user). It skips
// a user looked up less than lookupEvery ago (errLookupSkipped).
func (d *Directory) lookup(ctx context.Context, uid int64) (DirectoryEntry, bool, error) {
	now := d.now()
	d.mu.Lock()
	if now.Sub(d.looked[uid]) < lookupEvery {
		d.mu.Unlock()
		return DirectoryEntry{}, false, errLookupSkipped
	}
	d.looked[uid] = now
	if len(d.looked) > 10000 { // bounded: forget old lookups
		for k, at := range d.looked {
			if now.Sub(at) >= lookupEvery {
				delete(d.looked, k)
			}
		}
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	v, err := d.rdb.HGet(ctx, directoryKey, strconv.FormatInt(uid, 10)).Result()
	if errors.Is(err, redis.Nil) {
		exists, xerr := d.rdb.Exists(ctx, directoryVersionKey).Result()
		if xerr != nil {
			return DirectoryEntry{}, false, xerr
		}
		if exists == 0 { // Redis lost the directory: no answer until authtoken rewrites it
			return DirectoryEntry{}, false, errDirectoryAbsent
		}
		return DirectoryEntry{}, false, nil
	}
	if err != nil {
		return DirectoryEntry{}, false, err
	}
	e, err := decodeEntry(uid, v)
	if err != nil {
		return DirectoryEntry{}, false, err
	}
	d.mu.Lock()
	if d.users != nil {
		d.users[uid] = e
	}
	d.mu.Unlock()
	return e, true, nil
}
