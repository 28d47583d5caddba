package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/text/language"
)

// devUsers are the built-in development users, keyed by their stable subject (so obsops finds
// the same user after every restart of devidp). Their passwords are public.
//
//	alice / wonderland   made admin by obsops through OPS_BOOTSTRAP_ADMINS=alice (make up)
//	bob   / builder      a plain user (role viewer)
func devUsers() map[string]*storage.User {
	return map[string]*storage.User{
		"dev-alice": {
			ID: "dev-alice", Username: "alice", Password: "wonderland",
			FirstName: "Alice", LastName: "Liddell", Email: "alice@example.org", EmailVerified: true,
			PreferredLanguage: language.English,
		},
		"dev-bob": {
			ID: "dev-bob", Username: "bob", Password: "builder",
			FirstName: "Bob", LastName: "Builder", Email: "bob@example.org", EmailVerified: true,
			PreferredLanguage: language.English,
		},
	}
}

// userStore is an in-memory storage.UserStore keyed by user id. Tests add users to a running
// devidp (POST /dev/users), so it is guarded by a lock.
type userStore struct {
	mu    sync.RWMutex
	users map[string]*storage.User
}

// GetUserByID returns the user with id, or nil.
func (u *userStore) GetUserByID(id string) *storage.User {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.users[id]
}

// GetUserByUsername returns the user called name, or nil.
func (u *userStore) GetUserByUsername(name string) *storage.User {
	u.mu.RLock()
	defer u.mu.RUnlock()
	for _, user := range u.users {
		if user.Username == name {
			return user
		}
	}
	return nil
}

// ExampleClientID is the example's JWT-profile service user (unused by obsops).
func (u *userStore) ExampleClientID() string { return storage.ServiceUserID }

// add stores user unless its id or username is taken.
func (u *userStore) add(user *storage.User) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, other := range u.users {
		if other.ID == user.ID || other.Username == user.Username {
			return fmt.Errorf("a user with id %q or username %q exists", user.ID, user.Username)
		}
	}
	u.users[user.ID] = user
	return nil
}

// users is the store: the dev users, or those of the users file (the example's JSON format).
func (c *Config) users() (*userStore, error) {
	if c.UsersFile == "" {
		return &userStore{users: devUsers()}, nil
	}
	b, err := os.ReadFile(c.UsersFile)
	if err != nil {
		return nil, err
	}
	users := map[string]*storage.User{}
	if err := json.Unmarshal(b, &users); err != nil {
		return nil, fmt.Errorf("%s: %w", c.UsersFile, err)
	}
	return &userStore{users: users}, nil
}

// newUser is the body of POST /dev/users: a person as the provider will describe them.
type newUser struct {
	ID            string `json:"id"`       // the subject (sub)
	Username      string `json:"username"` // preferred_username
	Password      string `json:"password"`
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
	FirstName     string `json:"first_name"`
	LastName      string `json:"last_name"`
}

// addUserHandler serves POST /dev/users: tests add people with a chosen preferred_username,
// email and email_verified (e.g. an unverified address, or the username of an existing obsops
// account) to the running provider. 201 when added, 400 for a bad body, 409 when the id or
// username is taken. devidp listens on loopback only, like every other of its endpoints.
func addUserHandler(store *userStore) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a user", http.StatusMethodNotAllowed)
			return
		}
		var in newUser
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil || in.ID == "" || in.Username == "" || in.Password == "" {
			http.Error(w, "a JSON user with id, username and password is required", http.StatusBadRequest)
			return
		}
		err := store.add(&storage.User{
			ID: in.ID, Username: in.Username, Password: in.Password, FirstName: in.FirstName, LastName: in.LastName,
			Email: in.Email, EmailVerified: in.EmailVerified, PreferredLanguage: language.English,
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
}

// describeUsers names the users for the start-up log (never their passwords).
func (c *Config) describeUsers() string {
	if c.UsersFile != "" {
		return "from " + c.UsersFile
	}
	var names []string
	for _, u := range devUsers() {
		names = append(names, u.Username)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// newProvider builds the OpenID provider: the example OP of zitadel/oidc (discovery, authorize,
// token, userinfo, JWKS, a username/password login form at /login/username) over the example's
// in-memory storage, with obsops' confidential client (client_secret_basic, PKCE S256).
func newProvider(cfg *Config, log *slog.Logger) (http.Handler, error) {
	users, err := cfg.users()
	if err != nil {
		return nil, err
	}
	client := storage.WebClient(cfg.ClientID, cfg.ClientSecret, cfg.RedirectURIs...)
	store := storage.NewStorageWithClients(users, map[string]*storage.Client{cfg.ClientID: client})
	mux := http.NewServeMux()
	mux.Handle("/dev/users", addUserHandler(users))
	mux.Handle("/", exampleop.SetupServer(cfg.Issuer, store, log, false))
	return mux, nil
}
